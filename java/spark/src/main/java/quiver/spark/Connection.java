package quiver.spark;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.Serializable;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import org.apache.arrow.flight.CallHeaders;
import org.apache.arrow.flight.CallOption;
import org.apache.arrow.flight.CallOptions;
import org.apache.arrow.flight.FlightCallHeaders;
import org.apache.arrow.flight.FlightClient;
import org.apache.arrow.flight.HeaderCallOption;
import org.apache.arrow.flight.Location;
import org.apache.arrow.flight.auth2.BearerCredentialWriter;
import org.apache.arrow.flight.grpc.CredentialCallOption;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;

/**
 * How to reach a quiver server: the data source's options (the Python connector's names),
 * kept as strings so that a task on an executor can open its own client.
 */
final class Connection implements Serializable {
  private static final long serialVersionUID = 1L;

  final String uri;
  private final String username;
  private final String password;
  private final String token;
  private final String tlsRootCerts;
  private final String certChain;
  private final String privateKey;
  private final String overrideHostname;
  private final Double timeoutSeconds;
  /** {@code "auto"} (the default), {@code "shm"} or {@code "grpc"}. */
  private final String transport;

  private Connection(Map<String, String> options) {
    this.uri = options.get("uri");
    if (uri == null || uri.isBlank()) {
      throw new IllegalArgumentException(
          "the quiver data source needs option(\"uri\", \"grpc+tcp://host:port\")");
    }
    this.username = options.get("username");
    this.password = options.get("password");
    this.token = options.get("token");
    if (username != null && password == null) {
      throw new IllegalArgumentException("option \"username\" needs option \"password\"");
    }
    this.tlsRootCerts = options.get("tls_root_certs");
    this.certChain = options.get("cert_chain");
    this.privateKey = options.get("private_key");
    if ((certChain == null) != (privateKey == null)) {
      throw new IllegalArgumentException(
          "mutual TLS needs both options \"cert_chain\" and \"private_key\"");
    }
    this.overrideHostname = options.get("override_hostname");
    String timeout = options.get("timeout");
    this.timeoutSeconds = timeout == null ? null : Double.valueOf(timeout);
    this.transport = options.getOrDefault("transport", "auto");
    if (!transport.equals("auto") && !transport.equals("shm") && !transport.equals("grpc")) {
      throw new IllegalArgumentException(
          "option \"transport\" is \"auto\", \"shm\" or \"grpc\", not \"" + transport + "\"");
    }
  }

  /** Whether reads may go through shared memory ({@code "auto"} or {@code "shm"}). */
  boolean sharedMemoryAllowed() {
    return !transport.equals("grpc");
  }

  /** Whether reads must go through shared memory ({@code "shm"}). */
  boolean sharedMemoryOnly() {
    return transport.equals("shm");
  }

  /** The connection the options name (case-insensitive keys, as Spark passes them). */
  static Connection of(Map<String, String> options) {
    return new Connection(lowerKeys(options));
  }

  static Map<String, String> lowerKeys(Map<String, String> options) {
    Map<String, String> lower = new java.util.HashMap<>();
    options.forEach((k, v) -> lower.put(k.toLowerCase(java.util.Locale.ROOT), v));
    return lower;
  }

  /**
   * A client of {@code location} (the option's URI when null), opened with this connection,
   * with an allocator of its own that it closes.
   */
  Client open(String location) {
    BufferAllocator allocator = new RootAllocator();
    try {
      return open(allocator, location);
    } catch (RuntimeException e) {
      allocator.close();
      throw e;
    }
  }

  private Client open(BufferAllocator allocator, String location) {
    Location where = location(location == null ? uri : location);
    FlightClient.Builder builder = FlightClient.builder(allocator, where);
    try {
      if (where.getUri().getScheme().equals("grpc+tls")) {
        builder.useTls();
        // The builder reads these streams when it builds, not now: in memory, not files.
        if (tlsRootCerts != null) {
          builder.trustedCertificates(pem(tlsRootCerts));
        }
        if (certChain != null) {
          builder.clientCertificate(pem(certChain), pem(privateKey));
        }
        if (overrideHostname != null) {
          builder.overrideHostname(overrideHostname);
        }
      }
    } catch (IOException e) {
      throw new IllegalArgumentException("the quiver data source's TLS files: " + e, e);
    }
    FlightClient client = builder.build();
    List<CallOption> options = new ArrayList<>();
    if (timeoutSeconds != null) {
      options.add(CallOptions.timeout((long) (timeoutSeconds * 1000), TimeUnit.MILLISECONDS));
    }
    try {
      if (token != null) {
        options.add(new CredentialCallOption(new BearerCredentialWriter(token)));
      } else if (username != null) {
        Optional<CredentialCallOption> bearer =
            client.authenticateBasicToken(username, password);
        bearer.ifPresent(options::add);
      }
    } catch (RuntimeException e) {
      close(client);
      throw e;
    }
    return new Client(client, allocator, options.toArray(new CallOption[0]));
  }

  private static InputStream pem(String path) throws IOException {
    return new ByteArrayInputStream(Files.readAllBytes(Path.of(path)));
  }

  private static Location location(String uri) {
    URI parsed = URI.create(uri);
    String scheme = parsed.getScheme();
    if (scheme == null) {
      throw new IllegalArgumentException("not a server URI: " + uri);
    }
    switch (scheme) {
      case "grpc":
      case "grpc+tcp":
        return Location.forGrpcInsecure(parsed.getHost(), parsed.getPort());
      case "grpc+tls":
        return Location.forGrpcTls(parsed.getHost(), parsed.getPort());
      default:
        throw new IllegalArgumentException(
            "not a server URI the JVM connector reaches (grpc://, grpc+tcp://, grpc+tls://): "
                + uri);
    }
  }

  private static void close(FlightClient client) {
    try {
      client.close();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  /**
   * A Flight client, the allocator its streams use, and the call options every call of this
   * connection carries.
   */
  static final class Client implements AutoCloseable {
    final FlightClient flight;
    final BufferAllocator allocator;
    final CallOption[] options;

    Client(FlightClient flight, BufferAllocator allocator, CallOption[] options) {
      this.flight = flight;
      this.allocator = allocator;
      this.options = options;
    }

    /** This client's call options and the header that asks for a shared-memory endpoint. */
    CallOption[] sharedMemoryOptions() {
      CallHeaders headers = new FlightCallHeaders();
      headers.insert(SharedMemory.TRANSPORT_HEADER, SharedMemory.TRANSPORT_VALUE);
      CallOption[] all = java.util.Arrays.copyOf(options, options.length + 1);
      all[options.length] = new HeaderCallOption(headers);
      return all;
    }

    @Override
    public void close() {
      Connection.close(flight);
      allocator.close();
    }
  }
}
