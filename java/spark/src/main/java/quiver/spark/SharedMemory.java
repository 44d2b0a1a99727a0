package quiver.spark;

import java.io.IOException;
import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.arrow.flatbuf.Message;
import org.apache.arrow.flatbuf.MessageHeader;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.ForeignAllocation;
import org.apache.arrow.vector.ipc.message.ArrowDictionaryBatch;
import org.apache.arrow.vector.ipc.message.ArrowMessage;
import org.apache.arrow.vector.ipc.message.ArrowRecordBatch;
import org.apache.arrow.vector.ipc.message.MessageSerializer;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * A table's version read through the server's shared-memory socket (docs/shm.md): Arrow's
 * Dissociated IPC, the headers over a {@code SOCK_SEQPACKET} Unix socket, the bodies in the
 * server's sealed memfds, which are mapped read-only and wrapped as Arrow buffers. Nothing is
 * copied: each batch's buffers are slices of the mapping.
 *
 * <p>Java cannot open such a socket, receive descriptors ({@code SCM_RIGHTS}) or map one by
 * itself before the foreign-function API (final in Java 22): {@link #calls()} gives the system
 * calls on Java 22 and newer ({@code ForeignCalls}, compiled from {@code src/main/java22}), and
 * says why not elsewhere.
 */
final class SharedMemory {
  /** The URI scheme of a shared-memory location. */
  static final String SCHEME = "shm+unix";
  /** The GetFlightInfo header that asks for a shared-memory endpoint, and its value. */
  static final String TRANSPORT_HEADER = "x-quiver-transport";

  static final String TRANSPORT_VALUE = "shm";

  /** Largest datagram the server sends (a header, a bundle or a list of buffers). */
  static final int MAX_MESSAGE = 4 << 20;
  /** Most memfds passed with one message (the server's limit too). */
  static final int MAX_FDS = 16;

  private static final int UNTAGGED = 0;
  private static final int TAGGED = 1;
  private static final int REPLY = 2;
  private static final int BUNDLE = 3;
  private static final int END_OF_STREAM = 0;
  private static final int METADATA = 1;
  private static final long BODY_SHARED = 1;
  private static final long SEQUENCE_MASK = 0xFFFF_FFFFL;
  /** Offsets per free_data message. */
  private static final int FREE_CHUNK = 8192;
  /** gRPC's PERMISSION_DENIED: a ticket the socket did not give (another server's socket). */
  private static final int PERMISSION_DENIED = 7;

  private static final String FOREIGN_CALLS = "quiver.spark.ForeignCalls";

  private SharedMemory() {}

  /** The path cannot be used here: the caller may read over gRPC instead. */
  static final class Unavailable extends IOException {
    private static final long serialVersionUID = 1L;

    Unavailable(String message) {
      super(message);
    }

    Unavailable(String message, Throwable cause) {
      super(message, cause);
    }
  }

  /** The system calls shared memory takes. */
  interface Calls {
    /** A {@code SOCK_SEQPACKET} socket connected to {@code path}. */
    Channel connect(String path) throws IOException;

    /** The size of the file {@code fd} refers to. */
    long size(int fd) throws IOException;

    /** Maps {@code size} bytes of {@code fd} read-only and shared; returns the address. */
    long map(int fd, long size) throws IOException;

    void unmap(long address, long size);

    void close(int fd);
  }

  /** A connected socket: one datagram per message. */
  interface Channel extends AutoCloseable {
    void send(byte[] message) throws IOException;

    /**
     * The next datagram; the descriptors attached to it are added to {@code fds} (when not
     * null: else none are expected). An error if the server closed the connection.
     */
    byte[] receive(List<Integer> fds) throws IOException;

    @Override
    void close();
  }

  private static volatile Object loaded;

  /** The system calls, or {@link Unavailable} saying why this JVM has none. */
  static Calls calls() throws Unavailable {
    Object calls = loaded;
    if (calls == null) {
      calls = load();
      loaded = calls;
    }
    if (calls instanceof Unavailable) {
      Unavailable why = (Unavailable) calls;
      throw new Unavailable(why.getMessage(), why);
    }
    return (Calls) calls;
  }

  private static Object load() {
    int feature = Runtime.version().feature();
    if (feature < 22) {
      return new Unavailable(
          "shared memory from the JVM needs Java 22 or newer (its foreign-function API, to "
              + "receive and map the server's memfds); this is Java "
              + feature);
    }
    try {
      return Class.forName(FOREIGN_CALLS).getDeclaredConstructor().newInstance();
    } catch (ReflectiveOperationException | LinkageError e) {
      return new Unavailable(
          "the connector's jar was built without its Java 22 part ("
              + FOREIGN_CALLS
              + ": "
              + e
              + "); scripts/setup-spark-jvm.sh builds it when it finds a JDK 22+",
          e);
    }
  }

  /** A parsed {@code shm+unix://PATH?want_data=..&free_data=..&want_bundled=..} location. */
  static final class Location {
    final String path;
    final long want;
    final Long free;

    private Location(String path, long want, Long free) {
      this.path = path;
      this.want = want;
      this.free = free;
    }

    /** The location {@code uri} names, or null if it is not {@code shm+unix://}. */
    static Location parse(URI uri) throws IOException {
      if (!SCHEME.equals(uri.getScheme())) {
        return null;
      }
      Map<String, Long> tags = new TreeMap<>();
      String query = uri.getRawQuery() == null ? "" : uri.getRawQuery();
      for (String pair : query.split("&")) {
        int eq = pair.indexOf('=');
        if (eq > 0) {
          try {
            tags.put(pair.substring(0, eq), Long.parseLong(pair.substring(eq + 1)));
          } catch (NumberFormatException e) {
            throw new IOException("a shared-memory location with a bad tag: " + uri, e);
          }
        }
      }
      Long bundled = tags.get("want_bundled");
      Long want = bundled != null ? bundled : tags.get("want_data");
      if (want == null || uri.getPath() == null) {
        throw new IOException("a shared-memory location without want_data: " + uri);
      }
      return new Location(uri.getPath(), want, tags.get("free_data"));
    }
  }

  /**
   * A version mapped: its schema (as sent: a dictionary-encoded column has its values' type) and
   * its record and dictionary batches in stream order, whose buffers are slices of the memfds
   * (a dictionary batch replaces the dictionary of its id from there on). Closing it releases
   * the batches, unmaps the memfds once no buffer points into them, tells the server which
   * offsets it read ({@code free_data}) and closes the connection.
   */
  static final class Mapped implements AutoCloseable {
    final Schema schema;
    /** {@link ArrowRecordBatch}es and {@link ArrowDictionaryBatch}es. */
    final List<ArrowMessage> messages;
    private final List<ArrowBuf> regions;
    private final Channel channel;
    private final Long freeTag;
    private final long[] offsets;

    private Mapped(
        Schema schema,
        List<ArrowMessage> messages,
        List<ArrowBuf> regions,
        Channel channel,
        Long freeTag,
        long[] offsets) {
      this.schema = schema;
      this.messages = messages;
      this.regions = regions;
      this.channel = channel;
      this.freeTag = freeTag;
      this.offsets = offsets;
    }

    @Override
    public void close() {
      try {
        messages.forEach(SharedMemory::release);
        regions.forEach(ArrowBuf::close);
        if (freeTag != null) {
          for (int i = 0; i < offsets.length; i += FREE_CHUNK) {
            int count = Math.min(FREE_CHUNK, offsets.length - i);
            ByteBuffer body = ByteBuffer.allocate(8 * count).order(ByteOrder.LITTLE_ENDIAN);
            for (int j = 0; j < count; j++) {
              body.putLong(offsets[i + j]);
            }
            channel.send(tagged(freeTag, body.array()));
          }
        }
      } catch (IOException e) {
        // The server frees what a connection held when it closes: nothing is lost.
      } finally {
        channel.close();
      }
    }
  }

  /**
   * Reads the version {@code ticket} (a shared-memory endpoint's) names from the socket at
   * {@code location}, into buffers of {@code allocator}.
   *
   * @throws Unavailable the socket cannot be reached or refuses the ticket (not this server's
   *     socket), or the version has a delta dictionary batch (read over gRPC)
   * @throws IOException the server answered with an error, or with something malformed
   */
  static Mapped get(Calls calls, BufferAllocator allocator, Location location, byte[] ticket)
      throws IOException {
    Channel channel = calls.connect(location.path);
    List<ArrowBuf> regions = new ArrayList<>();
    List<ArrowMessage> messages = new ArrayList<>();
    try {
      channel.send(tagged(location.want, ticket));
      List<Integer> fds = new ArrayList<>();
      byte[] datagram = channel.receive(fds);
      try {
        if (datagram.length > 0 && datagram[0] == REPLY) {
          throw replyError(datagram);
        }
        if (fds.isEmpty()) {
          throw new IOException("the server sent no memory handle with the stream");
        }
        for (int fd : fds) {
          regions.add(map(calls, allocator, fd));
        }
      } finally {
        fds.forEach(calls::close);
      }
      long size = 0;
      for (ArrowBuf region : regions) {
        size += region.capacity();
      }
      Stream stream = new Stream(size);
      while (true) {
        for (ByteBuffer message : unbundle(datagram)) {
          stream.add(message);
        }
        if (stream.complete()) {
          break;
        }
        datagram = channel.receive(null);
      }
      Schema schema = stream.schema();
      for (int seq = 1; seq < stream.end; seq++) {
        ArrowMessage message = stream.batch(seq, regions, allocator);
        messages.add(message);
        if (message instanceof ArrowDictionaryBatch && ((ArrowDictionaryBatch) message).isDelta()) {
          throw new Unavailable("a delta dictionary batch (message " + seq + "): read over gRPC");
        }
      }
      return new Mapped(schema, messages, regions, channel, location.free, stream.offsets());
    } catch (IOException | RuntimeException e) {
      messages.forEach(SharedMemory::release);
      regions.forEach(ArrowBuf::close);
      channel.close();
      throw e;
    }
  }

  /** Releases a record or dictionary batch's buffers. */
  private static void release(ArrowMessage message) {
    if (message instanceof ArrowRecordBatch) {
      ((ArrowRecordBatch) message).close();
    } else {
      ((ArrowDictionaryBatch) message).close();
    }
  }

  /** The memfd mapped and wrapped as one buffer of {@code allocator}; unmapped when released. */
  private static ArrowBuf map(Calls calls, BufferAllocator allocator, int fd)
      throws IOException {
    long size = calls.size(fd);
    if (size <= 0) {
      throw new IOException("the server sent an empty memfd");
    }
    long address = calls.map(fd, size);
    try {
      return allocator.wrapForeignAllocation(
          new ForeignAllocation(size, address) {
            @Override
            protected void release0() {
              calls.unmap(address, size);
            }
          });
    } catch (RuntimeException e) {
      calls.unmap(address, size);
      throw e;
    }
  }

  static byte[] tagged(long tag, byte[] body) {
    ByteBuffer out = ByteBuffer.allocate(9 + body.length).order(ByteOrder.LITTLE_ENDIAN);
    out.put((byte) TAGGED).putLong(tag).put(body);
    return out.array();
  }

  /** The error a reply message carries ({@code [2][code][serialized google.rpc.Status]}). */
  private static IOException replyError(byte[] reply) {
    int code = reply.length > 1 ? reply[1] & 0xFF : 2;
    String message = statusMessage(reply);
    if (code == PERMISSION_DENIED) {
      return new Unavailable("the shared-memory socket refused the ticket: " + message);
    }
    return new IOException("the server refused the shared-memory read (code " + code + "): "
        + message);
  }

  /** Field 2 (message) of a serialized {@code google.rpc.Status}, or the bytes as text. */
  private static String statusMessage(byte[] reply) {
    if (reply.length <= 2) {
      return "(no message)";
    }
    try {
      return com.google.rpc.Status.parseFrom(ByteBuffer.wrap(reply, 2, reply.length - 2))
          .getMessage();
    } catch (com.google.protobuf.InvalidProtocolBufferException | NoClassDefFoundError e) {
      return new String(reply, 2, reply.length - 2, java.nio.charset.StandardCharsets.UTF_8);
    }
  }

  /** The messages a datagram holds: itself, or those of a bundle. */
  private static List<ByteBuffer> unbundle(byte[] datagram) throws IOException {
    ByteBuffer all = ByteBuffer.wrap(datagram).order(ByteOrder.LITTLE_ENDIAN);
    if (datagram.length == 0 || datagram[0] != BUNDLE) {
      return List.of(all);
    }
    List<ByteBuffer> messages = new ArrayList<>();
    int pos = 1;
    while (pos < datagram.length) {
      if (pos + 4 > datagram.length) {
        throw new IOException("a bundle cut inside a message's length");
      }
      int length = all.getInt(pos);
      pos += 4;
      if (length <= 0 || length > datagram.length - pos) {
        throw new IOException("a bundled message longer than its bundle, or empty");
      }
      messages.add(ByteBuffer.wrap(datagram, pos, length).slice().order(ByteOrder.LITTLE_ENDIAN));
      pos += length;
    }
    return messages;
  }

  /** The metadata stream and the body messages received so far. */
  private static final class Stream {
    private final long size;
    private final Map<Integer, ByteBuffer> metadata = new TreeMap<>();
    /** Each body message's buffer offsets; the first is where its body starts. */
    private final Map<Integer, long[]> bodies = new TreeMap<>();

    private int end = -1;

    Stream(long size) {
      this.size = size;
    }

    void add(ByteBuffer message) throws IOException {
      int kind = message.get(0);
      if (kind == UNTAGGED) {
        if (message.remaining() < 6) {
          throw new IOException("a metadata message shorter than its prefix");
        }
        int seq = message.getInt(2);
        if (message.get(1) == END_OF_STREAM) {
          end = seq;
        } else if (message.get(1) == METADATA) {
          ByteBuffer flatbuffer = message.duplicate();
          flatbuffer.position(6);
          metadata.put(seq, flatbuffer.slice().order(ByteOrder.LITTLE_ENDIAN));
        } else {
          throw new IOException("unknown metadata message type " + message.get(1));
        }
      } else if (kind == TAGGED) {
        if (message.remaining() < 9) {
          throw new IOException("a tagged message shorter than its tag");
        }
        long tag = message.getLong(1);
        bodies.put((int) (tag & SEQUENCE_MASK), buffers(tag, message));
      } else if (kind == REPLY) {
        byte[] reply = new byte[message.remaining()];
        message.duplicate().get(reply);
        throw replyError(reply);
      } else {
        throw new IOException("unknown message kind " + kind);
      }
    }

    /** The offsets of a body message's buffers, each checked to lie in the memfds. */
    private long[] buffers(long tag, ByteBuffer message) throws IOException {
      if (tag >>> 56 != BODY_SHARED) {
        throw new IOException("body type " + (tag >>> 56) + ": only type 1 is read");
      }
      int body = message.remaining() - 9;
      if (body < 16 || body % 16 != 0) {
        throw new IOException("a body message that is not u64 pairs");
      }
      long total = message.getLong(9);
      long count = message.getLong(17);
      if (body != 16 * (count + 1)) {
        throw new IOException("a body message whose count does not match its pairs");
      }
      long[] offsets = new long[(int) count];
      long sum = 0;
      for (int i = 0; i < count; i++) {
        long offset = message.getLong(25 + 16 * i);
        long length = message.getLong(33 + 16 * i);
        if (offset < 0 || length < 0 || offset > size || length > size - offset) {
          throw new IOException(
              "a buffer at " + offset + " of " + length + " bytes lies outside the memfds");
        }
        if (i > 0 && offset < offsets[0]) {
          throw new IOException("a body message whose first buffer is not its lowest");
        }
        offsets[i] = offset;
        sum += length;
      }
      if (sum != total) {
        throw new IOException("a body message whose total does not match its buffers");
      }
      return offsets;
    }

    boolean complete() throws IOException {
      if (end < 0 || metadata.size() < end) {
        return false;
      }
      for (int seq = 0; seq < end; seq++) {
        if (!metadata.containsKey(seq)) {
          throw new IOException("gaps in the metadata stream's sequence numbers");
        }
      }
      // Every message but the schema (seq 0) has a body in quiver's streams.
      for (int seq = 1; seq < end; seq++) {
        if (!bodies.containsKey(seq)) {
          return false;
        }
      }
      return true;
    }

    Schema schema() throws IOException {
      Message message = Message.getRootAsMessage(metadata.get(0).duplicate());
      if (message.headerType() != MessageHeader.Schema) {
        throw new IOException(
            "the stream does not start with a schema (header type " + message.headerType() + ")");
      }
      return MessageSerializer.deserializeSchema(message);
    }

    /**
     * Record or dictionary batch {@code seq}: its header as received, its body a slice of its
     * memfd.
     */
    ArrowMessage batch(int seq, List<ArrowBuf> regions, BufferAllocator allocator)
        throws IOException {
      Message message = Message.getRootAsMessage(metadata.get(seq).duplicate());
      byte type = message.headerType();
      if (type != MessageHeader.RecordBatch && type != MessageHeader.DictionaryBatch) {
        throw new IOException(
            "message " + seq + " is neither a record nor a dictionary batch (header type "
                + type + ")");
      }
      ArrowBuf body = body(seq, message.bodyLength(), regions, allocator);
      return type == MessageHeader.RecordBatch
          ? MessageSerializer.deserializeRecordBatch(message, body)
          : MessageSerializer.deserializeDictionaryBatch(message, body);
    }

    /**
     * The body of message {@code seq}, {@code length} bytes from its first buffer on: a slice of
     * the memfd that holds it, with a reference of its own (the batch made from it releases the
     * body it is given; the region's reference stays with the region).
     */
    private ArrowBuf body(int seq, long length, List<ArrowBuf> regions, BufferAllocator allocator)
        throws IOException {
      long[] offsets = bodies.get(seq);
      if (length == 0 || offsets.length == 0) {
        return allocator.getEmpty();
      }
      long start = offsets[0];
      for (ArrowBuf region : regions) {
        long capacity = region.capacity();
        if (start < capacity) {
          if (length > capacity - start) {
            throw new IOException(
                "message " + seq + ": its body of " + length + " bytes runs past its memfd");
          }
          ArrowBuf body = region.slice(start, length);
          body.getReferenceManager().retain();
          return body;
        }
        start -= capacity;
      }
      throw new IOException("message " + seq + ": its body starts past the memfds");
    }

    /** Every offset received, once (buffers of no bytes may share one with the next). */
    long[] offsets() {
      TreeSet<Long> all = new TreeSet<>();
      for (long[] offsets : bodies.values()) {
        for (long offset : offsets) {
          all.add(offset);
        }
      }
      return all.stream().mapToLong(Long::longValue).toArray();
    }
  }
}
