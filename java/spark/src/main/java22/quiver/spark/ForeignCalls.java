package quiver.spark;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_BYTE;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;
import static java.lang.foreign.ValueLayout.JAVA_SHORT;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.StructLayout;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.VarHandle;
import java.nio.charset.StandardCharsets;
import java.util.List;

/**
 * {@link SharedMemory}'s system calls through Java's foreign-function API (final in Java 22):
 * libc's {@code socket}, {@code connect}, {@code send}, {@code recvmsg} (with {@code
 * SCM_RIGHTS}), {@code lseek}, {@code mmap}, {@code munmap} and {@code close}, on Linux with
 * the LP64 layouts of {@code msghdr} and {@code cmsghdr}. Compiled with {@code --release 22}
 * from {@code src/main/java22} into the same jar; {@link SharedMemory#calls()} loads it only
 * on Java 22 and newer.
 */
@SuppressWarnings("restricted") // the point of the class: calls into libc
final class ForeignCalls implements SharedMemory.Calls {
  private static final int AF_UNIX = 1;
  private static final int SOCK_SEQPACKET = 5;
  private static final int SOCK_CLOEXEC = 0x80000;
  private static final int SOL_SOCKET = 1;
  private static final int SO_RCVTIMEO = 20;
  private static final int SCM_RIGHTS = 1;
  private static final int MSG_CTRUNC = 0x8;
  private static final int MSG_TRUNC = 0x20;
  private static final int MSG_NOSIGNAL = 0x4000;
  private static final int MSG_CMSG_CLOEXEC = 0x40000000;
  private static final int EINTR = 4;
  private static final int PROT_READ = 1;
  private static final int MAP_SHARED = 1;
  private static final int SEEK_END = 2;
  /** {@code sizeof(struct sockaddr_un)}: a family, then 108 bytes of path. */
  private static final int SOCKADDR_UN = 110;
  /** {@code struct msghdr}: name, namelen, iov, iovlen, control, controllen, flags. */
  private static final long MSGHDR = 56;

  private static final long MSG_IOV = 16;
  private static final long MSG_IOVLEN = 24;
  private static final long MSG_CONTROL = 32;
  private static final long MSG_CONTROLLEN = 40;
  private static final long MSG_FLAGS = 48;
  /** {@code CMSG_LEN(0)}: a {@code cmsghdr}'s length, level and type. */
  private static final long CMSG_HEADER = 16;
  /** {@code CMSG_SPACE} of {@link SharedMemory#MAX_FDS} descriptors. */
  private static final long CONTROL = CMSG_HEADER + 4L * SharedMemory.MAX_FDS;
  /** How long a receive waits for the server before the read fails. */
  private static final long RECEIVE_TIMEOUT_S = 60;

  private static final Linker LINKER = Linker.nativeLinker();
  private static final StructLayout STATE = Linker.Option.captureStateLayout();
  private static final VarHandle ERRNO =
      STATE.varHandle(MemoryLayout.PathElement.groupElement("errno"));

  private static final MethodHandle SOCKET =
      call("socket", FunctionDescriptor.of(JAVA_INT, JAVA_INT, JAVA_INT, JAVA_INT));
  private static final MethodHandle CONNECT =
      call("connect", FunctionDescriptor.of(JAVA_INT, JAVA_INT, ADDRESS, JAVA_INT));
  private static final MethodHandle SETSOCKOPT =
      call(
          "setsockopt",
          FunctionDescriptor.of(JAVA_INT, JAVA_INT, JAVA_INT, JAVA_INT, ADDRESS, JAVA_INT));
  private static final MethodHandle SEND =
      call("send", FunctionDescriptor.of(JAVA_LONG, JAVA_INT, ADDRESS, JAVA_LONG, JAVA_INT));
  private static final MethodHandle RECVMSG =
      call("recvmsg", FunctionDescriptor.of(JAVA_LONG, JAVA_INT, ADDRESS, JAVA_INT));
  private static final MethodHandle LSEEK =
      call("lseek", FunctionDescriptor.of(JAVA_LONG, JAVA_INT, JAVA_LONG, JAVA_INT));
  private static final MethodHandle MMAP =
      call(
          "mmap",
          FunctionDescriptor.of(
              ADDRESS, ADDRESS, JAVA_LONG, JAVA_INT, JAVA_INT, JAVA_INT, JAVA_LONG));
  private static final MethodHandle MUNMAP =
      call("munmap", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_LONG));
  private static final MethodHandle CLOSE = call("close", FunctionDescriptor.of(JAVA_INT, JAVA_INT));
  private static final MethodHandle STRERROR =
      LINKER.downcallHandle(
          LINKER.defaultLookup().find("strerror").orElseThrow(),
          FunctionDescriptor.of(ADDRESS, JAVA_INT));

  public ForeignCalls() {
    if (!System.getProperty("os.name", "").startsWith("Linux")) {
      throw new UnsupportedOperationException("shared memory is read on Linux only");
    }
  }

  /** A libc function whose errno is captured in its first argument. */
  private static MethodHandle call(String name, FunctionDescriptor descriptor) {
    return LINKER.downcallHandle(
        LINKER.defaultLookup().find(name).orElseThrow(),
        descriptor,
        Linker.Option.captureCallState("errno"));
  }

  private static int errno(MemorySegment state) {
    return (int) ERRNO.get(state, 0L);
  }

  private static String describe(int errno) {
    try {
      MemorySegment text = (MemorySegment) STRERROR.invokeExact(errno);
      return text.reinterpret(256).getString(0, StandardCharsets.UTF_8) + " (errno " + errno + ")";
    } catch (Throwable e) {
      return "errno " + errno;
    }
  }

  private static IOException failed(String what, MemorySegment state) {
    return new IOException(what + ": " + describe(errno(state)));
  }

  private static RuntimeException unexpected(Throwable e) {
    return e instanceof RuntimeException ? (RuntimeException) e : new IllegalStateException(e);
  }

  @Override
  public SharedMemory.Channel connect(String path) throws IOException {
    byte[] name = path.getBytes(StandardCharsets.UTF_8);
    if (name.length >= SOCKADDR_UN - 2) {
      throw new SharedMemory.Unavailable("the shared-memory socket's path is too long: " + path);
    }
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment state = arena.allocate(STATE);
      int fd = (int) SOCKET.invokeExact(state, AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
      if (fd < 0) {
        throw failed("socket(AF_UNIX, SOCK_SEQPACKET)", state);
      }
      MemorySegment address = arena.allocate(SOCKADDR_UN);
      address.set(JAVA_SHORT, 0, (short) AF_UNIX);
      MemorySegment.copy(name, 0, address, JAVA_BYTE, 2, name.length);
      int done = (int) CONNECT.invokeExact(state, fd, address, SOCKADDR_UN);
      if (done != 0) {
        String why = describe(errno(state));
        close(fd);
        throw new SharedMemory.Unavailable(
            "cannot connect to the shared-memory socket " + path + ": " + why
                + " (is the server on this host?)");
      }
      MemorySegment timeout = arena.allocate(16);
      timeout.set(JAVA_LONG, 0, RECEIVE_TIMEOUT_S);
      int set = (int) SETSOCKOPT.invokeExact(state, fd, SOL_SOCKET, SO_RCVTIMEO, timeout, 16);
      if (set != 0) {
        IOException error = failed("setsockopt(SO_RCVTIMEO)", state);
        close(fd);
        throw error;
      }
      return new Socket(fd);
    } catch (IOException | RuntimeException e) {
      throw e;
    } catch (Throwable e) {
      throw unexpected(e);
    }
  }

  @Override
  public long size(int fd) throws IOException {
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment state = arena.allocate(STATE);
      long size = (long) LSEEK.invokeExact(state, fd, 0L, SEEK_END);
      if (size < 0) {
        throw failed("lseek of a memfd", state);
      }
      return size;
    } catch (IOException | RuntimeException e) {
      throw e;
    } catch (Throwable e) {
      throw unexpected(e);
    }
  }

  @Override
  public long map(int fd, long size) throws IOException {
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment state = arena.allocate(STATE);
      MemorySegment mapped =
          (MemorySegment)
              MMAP.invokeExact(state, MemorySegment.NULL, size, PROT_READ, MAP_SHARED, fd, 0L);
      if (mapped.address() == -1L) {
        throw failed("mmap of a " + size + "-byte memfd", state);
      }
      return mapped.address();
    } catch (IOException | RuntimeException e) {
      throw e;
    } catch (Throwable e) {
      throw unexpected(e);
    }
  }

  @Override
  public void unmap(long address, long size) {
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment state = arena.allocate(STATE);
      int ignored = (int) MUNMAP.invokeExact(state, MemorySegment.ofAddress(address), size);
    } catch (Throwable e) {
      throw unexpected(e);
    }
  }

  @Override
  public void close(int fd) {
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment state = arena.allocate(STATE);
      int ignored = (int) CLOSE.invokeExact(state, fd);
    } catch (Throwable e) {
      throw unexpected(e);
    }
  }

  /** A connected socket, with its receive buffer and {@code msghdr} allocated once. */
  private final class Socket implements SharedMemory.Channel {
    private final int fd;
    private final Arena arena = Arena.ofShared();
    private final MemorySegment state = arena.allocate(STATE);
    private final MemorySegment buffer = arena.allocate(SharedMemory.MAX_MESSAGE, 8);
    private final MemorySegment iov = arena.allocate(16, 8);
    private final MemorySegment control = arena.allocate(CONTROL, 8);
    private final MemorySegment header = arena.allocate(MSGHDR, 8);
    private boolean closed;

    Socket(int fd) {
      this.fd = fd;
      iov.set(ADDRESS, 0, buffer);
      iov.set(JAVA_LONG, 8, buffer.byteSize());
    }

    @Override
    public synchronized void send(byte[] message) throws IOException {
      try (Arena scratch = Arena.ofConfined()) {
        MemorySegment out = scratch.allocate(Math.max(message.length, 1));
        MemorySegment.copy(message, 0, out, JAVA_BYTE, 0, message.length);
        long sent;
        do {
          sent = (long) SEND.invokeExact(state, fd, out, (long) message.length, MSG_NOSIGNAL);
        } while (sent < 0 && errno(state) == EINTR);
        if (sent < 0) {
          throw failed("sending to the shared-memory socket", state);
        }
      } catch (IOException | RuntimeException e) {
        throw e;
      } catch (Throwable e) {
        throw unexpected(e);
      }
    }

    @Override
    public synchronized byte[] receive(List<Integer> fds) throws IOException {
      header.fill((byte) 0);
      header.set(ADDRESS, MSG_IOV, iov);
      header.set(JAVA_LONG, MSG_IOVLEN, 1L);
      header.set(ADDRESS, MSG_CONTROL, control);
      header.set(JAVA_LONG, MSG_CONTROLLEN, CONTROL);
      long size;
      try {
        do {
          size = (long) RECVMSG.invokeExact(state, fd, header, MSG_CMSG_CLOEXEC);
        } while (size < 0 && errno(state) == EINTR);
      } catch (RuntimeException e) {
        throw e;
      } catch (Throwable e) {
        throw unexpected(e);
      }
      if (size < 0) {
        throw failed("receiving from the shared-memory socket", state);
      }
      List<Integer> received = new java.util.ArrayList<>();
      long length = header.get(JAVA_LONG, MSG_CONTROLLEN);
      for (long at = 0; at + CMSG_HEADER <= length; ) {
        long cmsgLength = control.get(JAVA_LONG, at);
        if (cmsgLength < CMSG_HEADER || at + cmsgLength > length) {
          break;
        }
        if (control.get(JAVA_INT, at + 8) == SOL_SOCKET
            && control.get(JAVA_INT, at + 12) == SCM_RIGHTS) {
          for (long i = at + CMSG_HEADER; i + 4 <= at + cmsgLength; i += 4) {
            received.add(control.get(JAVA_INT, i));
          }
        }
        at += (cmsgLength + 7) & ~7L;
      }
      int flags = header.get(JAVA_INT, MSG_FLAGS);
      if (fds == null && !received.isEmpty() || (flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
        received.forEach(ForeignCalls.this::close);
        throw new IOException("a shared-memory message was cut short, or came with handles");
      }
      if (size == 0 && received.isEmpty()) {
        throw new IOException("the server closed the shared-memory connection");
      }
      if (fds != null) {
        fds.addAll(received);
      }
      return buffer.asSlice(0, size).toArray(JAVA_BYTE);
    }

    @Override
    public synchronized void close() {
      if (!closed) {
        closed = true;
        ForeignCalls.this.close(fd);
        arena.close();
      }
    }
  }
}
