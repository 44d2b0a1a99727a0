//! The system calls of the shared-memory data plane: sealed memfds (and a
//! client's read-only mapping of one), Unix `SOCK_SEQPACKET` sockets, and file
//! descriptors passed with `SCM_RIGHTS`. A client uses them through
//! [`crate::client`].
//!
//! Every `unsafe` block of the shm module is here, each a plain libc call on
//! descriptors this module owns.

use std::ffi::CString;
use std::io::{self, IoSlice};
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The seals a memfd must carry to be trusted as immutable: no writes, no
/// shrinking (which would fault a reader's mapping), no growing.
pub(crate) const IMMUTABLE: libc::c_int =
    libc::F_SEAL_WRITE | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;

/// Largest datagram read from a client: requests are small (a ticket, a list
/// of offsets to free).
pub(crate) const MAX_REQUEST: usize = 1 << 20;

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn check_size(ret: libc::ssize_t) -> io::Result<usize> {
    usize::try_from(ret).map_err(|_| io::Error::last_os_error())
}

/// A new, empty memfd that can be sealed.
pub(crate) fn memfd(name: &str) -> io::Result<OwnedFd> {
    let name = CString::new(name).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: `name` is a valid C string; the descriptor returned is new and owned here.
    let fd = check(unsafe {
        libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
    })?;
    // SAFETY: `fd` was just returned by memfd_create and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// How many times a seal refused with EBUSY is tried, in all.
const SEAL_ATTEMPTS: u32 = 8;

/// Seals `fd` immutable, and against further seals.
///
/// The kernel refuses `F_SEAL_WRITE` with EBUSY while any page of the file
/// has a reference beyond the page cache's (it waits briefly for such pins
/// first). quiver writes its memfds with write(2) and maps them only once
/// sealed, so such a reference is a passing one of the kernel's own (seen
/// once in CI, under load): the seal is tried again, after 1, 2, 4, ... ms,
/// up to [`SEAL_ATTEMPTS`] times, then the error is returned.
pub(crate) fn seal(fd: BorrowedFd<'_>) -> io::Result<()> {
    let mut attempt = 0;
    loop {
        // SAFETY: fcntl on a descriptor we borrow; no memory is passed.
        let sealed = check(unsafe {
            libc::fcntl(
                fd.as_raw_fd(),
                libc::F_ADD_SEALS,
                IMMUTABLE | libc::F_SEAL_SEAL,
            )
        });
        match sealed {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && attempt + 1 < SEAL_ATTEMPTS => {
                std::thread::sleep(std::time::Duration::from_millis(1 << attempt));
                attempt += 1;
            }
            other => return other.map(drop),
        }
    }
}

/// The seals on `fd`; an error if it cannot carry seals (not a memfd).
pub(crate) fn seals(fd: BorrowedFd<'_>) -> io::Result<libc::c_int> {
    // SAFETY: fcntl on a descriptor we borrow; no memory is passed.
    check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) })
}

/// A `SOCK_SEQPACKET` Unix socket listening at `path`.
pub(crate) fn listen(path: &Path) -> io::Result<OwnedFd> {
    let socket = seqpacket_socket()?;
    let (addr, len) = unix_address(path)?;
    // SAFETY: `addr` is a valid sockaddr_un of `len` bytes.
    check(unsafe {
        libc::bind(
            socket.as_raw_fd(),
            (&raw const addr).cast::<libc::sockaddr>(),
            len,
        )
    })?;
    // SAFETY: listen on a socket we own.
    check(unsafe { libc::listen(socket.as_raw_fd(), 128) })?;
    Ok(socket)
}

/// Connects a `SOCK_SEQPACKET` socket to `path` (to probe for a live server).
pub(crate) fn connect(path: &Path) -> io::Result<OwnedFd> {
    let socket = seqpacket_socket()?;
    let (addr, len) = unix_address(path)?;
    // SAFETY: `addr` is a valid sockaddr_un of `len` bytes.
    check(unsafe {
        libc::connect(
            socket.as_raw_fd(),
            (&raw const addr).cast::<libc::sockaddr>(),
            len,
        )
    })?;
    Ok(socket)
}

fn seqpacket_socket() -> io::Result<OwnedFd> {
    // SAFETY: creates a new socket; the descriptor is owned below.
    let fd = check(unsafe {
        libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0)
    })?;
    // SAFETY: `fd` is new and owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn unix_address(path: &Path) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.is_empty() || bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a Unix socket path must have 1 to {} bytes and no NUL: {}",
                addr.sun_path.len() - 1,
                path.display()
            ),
        ));
    }
    for (dst, src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    let len = size_of::<libc::sa_family_t>() + bytes.len() + 1;
    Ok((addr, len as libc::socklen_t))
}

/// Waits for the next connection on `listener`.
pub(crate) fn accept(listener: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    // SAFETY: accept4 without an address buffer; the descriptor is owned below.
    let fd = check(unsafe {
        libc::accept4(
            listener.as_raw_fd(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_CLOEXEC,
        )
    })?;
    // SAFETY: `fd` is new and owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The process and user at the other end of a connected Unix socket.
pub(crate) fn peer(socket: BorrowedFd<'_>) -> io::Result<(libc::pid_t, libc::uid_t)> {
    // SAFETY: ucred is plain data; getsockopt writes at most `len` bytes into it.
    let mut cred: libc::ucred = unsafe { zeroed() };
    let mut len = size_of::<libc::ucred>() as libc::socklen_t;
    check(unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &mut len,
        )
    })?;
    Ok((cred.pid, cred.uid))
}

/// Sets how long a read on `socket` waits before failing (`None`: forever).
pub(crate) fn set_read_timeout(
    socket: BorrowedFd<'_>,
    timeout: Option<std::time::Duration>,
) -> io::Result<()> {
    let timeout = timeout.unwrap_or_default();
    let tv = libc::timeval {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_usec: libc::suseconds_t::from(timeout.subsec_micros() as i32),
    };
    // SAFETY: setsockopt reads `size_of::<timeval>()` bytes from `tv`.
    check(unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&raw const tv).cast(),
            size_of::<libc::timeval>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// Most descriptors attached to one message (a put's memfds).
pub(crate) const MAX_FDS: usize = 16;

/// Room for [`MAX_FDS`] descriptors' control message, aligned for cmsghdr:
/// CMSG_SPACE(16 × 4) is 80 bytes on 64-bit Linux.
type Control = [u64; 10];

/// Sends one datagram made of `parts`, with `fds` attached (at most [`MAX_FDS`]).
pub(crate) fn send(
    socket: BorrowedFd<'_>,
    parts: &[IoSlice<'_>],
    fds: &[BorrowedFd<'_>],
) -> io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} descriptors: at most {MAX_FDS} per message", fds.len()),
        ));
    }
    let mut control: Control = [0; 10];
    // SAFETY: msghdr is plain data; all zeroes is a valid value.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = parts.as_ptr().cast_mut().cast();
    msg.msg_iovlen = parts.len();
    if !fds.is_empty() {
        let payload = (fds.len() * size_of::<RawFd>()) as u32;
        // SAFETY: CMSG_SPACE of at most MAX_FDS descriptors fits in `control`
        // (checked below); CMSG_FIRSTHDR of a msghdr with a control buffer that
        // large is non-null and CMSG_DATA points inside it, with room for
        // `fds.len()` descriptors.
        unsafe {
            let space = libc::CMSG_SPACE(payload) as usize;
            assert!(space <= size_of::<Control>(), "control buffer too small");
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = space;
            let header = libc::CMSG_FIRSTHDR(&raw const msg);
            (*header).cmsg_level = libc::SOL_SOCKET;
            (*header).cmsg_type = libc::SCM_RIGHTS;
            (*header).cmsg_len = libc::CMSG_LEN(payload) as usize;
            let data = libc::CMSG_DATA(header).cast::<RawFd>();
            for (i, fd) in fds.iter().enumerate() {
                std::ptr::write_unaligned(data.add(i), fd.as_raw_fd());
            }
        }
    }
    let expected: usize = parts.iter().map(|p| p.len()).sum();
    // SAFETY: `msg` points at `parts` and `control`, both alive for the call.
    let sent = check_size(unsafe {
        libc::sendmsg(socket.as_raw_fd(), &raw const msg, libc::MSG_NOSIGNAL)
    })?;
    if sent != expected {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            format!("sent {sent} of a {expected}-byte datagram"),
        ));
    }
    Ok(())
}

/// One datagram received: its bytes and the descriptors attached, in order.
#[derive(Debug)]
pub(crate) struct Received {
    pub(crate) bytes: Vec<u8>,
    pub(crate) fds: Vec<OwnedFd>,
}

/// Receives one datagram of at most `max` bytes. `Ok(None)` when the peer
/// closed the connection. A longer datagram, or more than [`MAX_FDS`]
/// descriptors, is an error (the descriptors are closed).
pub(crate) fn recv(socket: BorrowedFd<'_>, max: usize) -> io::Result<Option<Received>> {
    let mut bytes = Vec::with_capacity(max);
    Ok(recv_into(socket, &mut bytes, max)?.map(|fds| Received { bytes, fds }))
}

/// Receives one datagram of at most `max` bytes into `bytes` (its contents
/// replaced; its capacity grown to `max` if short, and kept, so that a buffer
/// reused for every datagram is allocated once and never zeroed). The
/// descriptors attached, in order; `Ok(None)` when the peer closed the
/// connection. A longer datagram, or more than [`MAX_FDS`] descriptors, is an
/// error of kind `InvalidData` (the descriptors are closed).
pub(crate) fn recv_into(
    socket: BorrowedFd<'_>,
    bytes: &mut Vec<u8>,
    max: usize,
) -> io::Result<Option<Vec<OwnedFd>>> {
    bytes.clear();
    bytes.reserve(max);
    let mut control: Control = [0; 10];
    let mut iov = libc::iovec {
        iov_base: bytes.spare_capacity_mut().as_mut_ptr().cast(),
        iov_len: max,
    };
    // SAFETY: msghdr is plain data; all zeroes is a valid value.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of_val(&control);
    // SAFETY: `msg` points at `iov` (over `max` bytes of the spare capacity of
    // `bytes`, reserved above) and `control`, alive for the call.
    let n = check_size(unsafe {
        libc::recvmsg(socket.as_raw_fd(), &raw mut msg, libc::MSG_CMSG_CLOEXEC)
    })?;
    let mut fds = Vec::new();
    // SAFETY: walking the control messages the kernel wrote into `control`,
    // with the CMSG macros, within `msg_controllen`; each SCM_RIGHTS payload
    // holds whole descriptors, now owned by this process.
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(&raw const msg);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET && (*header).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(header);
                let payload = (*header).cmsg_len - libc::CMSG_LEN(0) as usize;
                for i in 0..payload / size_of::<RawFd>() {
                    let raw = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    fds.push(OwnedFd::from_raw_fd(raw));
                }
            }
            header = libc::CMSG_NXTHDR(&raw const msg, header);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("more than {MAX_FDS} descriptors attached to one message"),
        ));
    }
    if msg.msg_flags & libc::MSG_TRUNC != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a message over {max} bytes"),
        ));
    }
    if n == 0 && fds.is_empty() {
        return Ok(None);
    }
    // SAFETY: the kernel wrote `n` bytes (at most `max`, the iovec's length,
    // within the capacity) at the start of the spare capacity.
    unsafe { bytes.set_len(n) };
    Ok(Some(fds))
}

/// Maps `memfd` read-only, once it is known to be sealed [`IMMUTABLE`]: an
/// error of kind `InvalidData` if it is not a memfd or lacks a seal.
pub(crate) fn map_sealed(memfd: BorrowedFd<'_>) -> io::Result<memmap2::Mmap> {
    let seals = seals(memfd).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not a sealable memfd ({e})"),
        )
    })?;
    if seals & IMMUTABLE != IMMUTABLE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "a memfd not sealed against writing, shrinking and growing",
        ));
    }
    // SAFETY: the memfd is sealed against writes, shrinking and growing
    // (checked above), and seals cannot be removed: no process can change its
    // contents or cut pages from under the mapping, which is read-only.
    unsafe { memmap2::Mmap::map(&memfd) }
}

/// A connected pair of `SOCK_SEQPACKET` Unix sockets, both close-on-exec.
pub(crate) fn socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds: [libc::c_int; 2] = [-1; 2];
    // SAFETY: socketpair writes two descriptors into `fds`, owned below.
    check(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // SAFETY: both descriptors are new and owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Shuts `socket` down both ways: a thread blocked reading it wakes up with
/// end-of-file, and the peer reads end-of-file.
pub(crate) fn shutdown(socket: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: shutdown on a descriptor we borrow.
    check(unsafe { libc::shutdown(socket.as_raw_fd(), libc::SHUT_RDWR) })?;
    Ok(())
}

/// Makes `command`'s child get `fd` as its descriptor 3 (every other
/// descriptor of this process is close-on-exec) and `SIGKILL` when the thread
/// that spawns it exits, so that a child never outlives its parent.
pub(crate) fn pass_as_fd3(command: &mut std::process::Command, fd: RawFd) {
    use std::os::unix::process::CommandExt;
    const TARGET: RawFd = 3;
    // SAFETY: the closure runs in the child between fork and exec and only
    // makes async-signal-safe system calls (dup2, fcntl, prctl) on integers.
    unsafe {
        command.pre_exec(move || {
            if fd == TARGET {
                // dup2 onto itself would keep close-on-exec: clear it instead.
                let flags = check(libc::fcntl(TARGET, libc::F_GETFD))?;
                check(libc::fcntl(
                    TARGET,
                    libc::F_SETFD,
                    flags & !libc::FD_CLOEXEC,
                ))?;
            } else {
                check(libc::dup2(fd, TARGET))?;
            }
            check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL))?;
            Ok(())
        });
    }
}
