"""The clients suite's Flight clients, each a process of its own speaking one line protocol.

- ``go/``: arrow-go's Flight and Flight SQL clients (grpc-go), built by :mod:`.build` with
  ``go build`` from the Go module proxy into a cache outside the clone;
- ``java/``: Arrow Java's flight-core and flight-sql clients (grpc-netty), whose jars
  :mod:`.build` resolves from Maven Central with Maven and compiles against with javac;
- :mod:`.py_client`: pyarrow.flight, and ADBC's Flight SQL driver (``adbc_driver_flightsql``,
  itself grpc-go) through its DB-API.

The protocol (:mod:`.process`): one JSON request per line on stdin (``get``, ``prepare``,
``put``, ``sql``, ``latency``, ``quit``; each names the server by ``addr``, ``host:port``),
one JSON answer per line on stdout, so that the harness reads the server's CPU time around
each request. Every client uses its library's defaults for HTTP/2 (frame size, windows).
"""
