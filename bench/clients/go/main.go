// Command quiver-bench-client is the clients suite's Go Flight client (bench/suites/clients.py):
// arrow-go's Flight and Flight SQL clients over grpc-go with its defaults (its HTTP/2 settings
// advertise the default 16 KiB max frame size, which is what the suite measures servers
// against: nothing here raises it).
//
// It reads one JSON request per line on stdin and answers each with one JSON line on stdout,
// so that the harness can read the server's CPU time around each request. Every request but
// prepare and quit names its server by "addr" (host:port); a connection is made to each
// server on its first request and kept:
//
//	{"op": "get", "path": "t"}                       GetFlightInfo of the path, DoGet of every endpoint
//	{"op": "prepare", "kind": "ints", "rows": N, "batch_rows": B}   make the batches a put sends
//	{"op": "put", "path": "t"}                       DoPut of the prepared batches (mode replace)
//	{"op": "sql", "query": "SELECT * FROM t"}        Flight SQL: Execute, DoGet of every endpoint
//	{"op": "latency", "path": "t", "calls": N}       N gets of a small table, one after another
//	{"op": "quit"}
//
// Answers: {"seconds", "ttfb_seconds", "rows", "batches", "bytes", "endpoints"}, for latency
// {"latencies": [...seconds]}; a failure answers {"error": "..."}.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/flight/flightsql"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// StringWidth is the length of every string of the "strings" table: row i holds i in decimal,
// zero-padded to this many digits (bench/clients/tables.py makes the same values).
const StringWidth = 32

// MaxLatencyCalls bounds a latency request.
const MaxLatencyCalls = 100000

type request struct {
	Addr      string `json:"addr"`
	Op        string `json:"op"`
	Path      string `json:"path"`
	Query     string `json:"query"`
	Kind      string `json:"kind"`
	Rows      int64  `json:"rows"`
	BatchRows int64  `json:"batch_rows"`
	Calls     int    `json:"calls"`
}

type result struct {
	Seconds     float64   `json:"seconds"`
	TTFBSeconds float64   `json:"ttfb_seconds"`
	Rows        int64     `json:"rows"`
	Batches     int64     `json:"batches"`
	Bytes       int64     `json:"bytes"`
	Endpoints   int       `json:"endpoints"`
	Latencies   []float64 `json:"latencies,omitempty"`
}

// conn is the connections to one server.
type conn struct {
	flight flight.Client
	sql    *flightsql.Client
}

type client struct {
	conns   map[string]*conn
	alloc   memory.Allocator
	batches []arrow.RecordBatch
	schema  *arrow.Schema
}

func dialOptions() []grpc.DialOption {
	// Defaults only, bar plaintext: no window, frame or buffer size is set.
	return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
}

// conn returns the connections to addr, made on first use.
func (c *client) conn(addr string) (*conn, error) {
	if found, ok := c.conns[addr]; ok {
		return found, nil
	}
	if addr == "" {
		return nil, errors.New("no addr")
	}
	fc, err := flight.NewClientWithMiddleware(addr, nil, nil, dialOptions()...)
	if err != nil {
		return nil, err
	}
	sc, err := flightsql.NewClient(addr, nil, nil, dialOptions()...)
	if err != nil {
		return nil, err
	}
	c.conns[addr] = &conn{flight: fc, sql: sc}
	return c.conns[addr], nil
}

func bufferBytes(data arrow.ArrayData) int64 {
	var n int64
	for _, b := range data.Buffers() {
		if b != nil {
			n += int64(b.Len())
		}
	}
	for _, child := range data.Children() {
		n += bufferBytes(child)
	}
	return n
}

// readAll reads one DoGet stream to its end, counting rows, batches and buffer bytes.
func readAll(reader *flight.Reader, res *result, started time.Time) error {
	defer reader.Release()
	for reader.Next() {
		rec := reader.RecordBatch()
		if res.Batches == 0 && res.TTFBSeconds == 0 {
			res.TTFBSeconds = time.Since(started).Seconds()
		}
		res.Batches++
		res.Rows += rec.NumRows()
		for _, col := range rec.Columns() {
			res.Bytes += bufferBytes(col.Data())
		}
	}
	return reader.Err()
}

func (c *client) readEndpoints(ctx context.Context, cn *conn, info *flight.FlightInfo, res *result, started time.Time, viaSQL bool) error {
	res.Endpoints = len(info.Endpoint)
	for _, ep := range info.Endpoint {
		var reader *flight.Reader
		var err error
		if viaSQL {
			reader, err = cn.sql.DoGet(ctx, ep.Ticket)
		} else {
			var stream flight.FlightService_DoGetClient
			stream, err = cn.flight.DoGet(ctx, ep.Ticket)
			if err == nil {
				reader, err = flight.NewRecordReader(stream, ipc.WithAllocator(c.alloc))
			}
		}
		if err != nil {
			return err
		}
		if err := readAll(reader, res, started); err != nil {
			return err
		}
	}
	return nil
}

func (c *client) get(ctx context.Context, cn *conn, path string) (*result, error) {
	res := &result{}
	started := time.Now()
	desc := &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: strings.Split(path, "/")}
	info, err := cn.flight.GetFlightInfo(ctx, desc)
	if err != nil {
		return nil, err
	}
	if err := c.readEndpoints(ctx, cn, info, res, started, false); err != nil {
		return nil, err
	}
	res.Seconds = time.Since(started).Seconds()
	return res, nil
}

func (c *client) query(ctx context.Context, cn *conn, query string) (*result, error) {
	res := &result{}
	started := time.Now()
	info, err := cn.sql.Execute(ctx, query)
	if err != nil {
		return nil, err
	}
	if err := c.readEndpoints(ctx, cn, info, res, started, true); err != nil {
		return nil, err
	}
	res.Seconds = time.Since(started).Seconds()
	return res, nil
}

// makeBatches returns the table of kind "ints" (four int64 columns a-d, column k of row i
// holding 4*i+k) or "strings" (s: i zero-padded to StringWidth digits, n: i), in batches of
// batchRows rows.
func (c *client) makeBatches(kind string, rows, batchRows int64) ([]arrow.RecordBatch, *arrow.Schema, error) {
	if rows < 0 || batchRows <= 0 {
		return nil, nil, fmt.Errorf("bad shape: %d rows in batches of %d", rows, batchRows)
	}
	var schema *arrow.Schema
	switch kind {
	case "ints":
		fields := make([]arrow.Field, 4)
		for k, name := range []string{"a", "b", "c", "d"} {
			fields[k] = arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Int64}
		}
		schema = arrow.NewSchema(fields, nil)
	case "strings":
		schema = arrow.NewSchema([]arrow.Field{
			{Name: "s", Type: arrow.BinaryTypes.String},
			{Name: "n", Type: arrow.PrimitiveTypes.Int64},
		}, nil)
	default:
		return nil, nil, fmt.Errorf("unknown table kind %q", kind)
	}
	var out []arrow.RecordBatch
	digits := make([]byte, StringWidth)
	for start := int64(0); start < rows; start += batchRows {
		n := min(batchRows, rows-start)
		b := array.NewRecordBuilder(c.alloc, schema)
		switch kind {
		case "ints":
			for k := 0; k < 4; k++ {
				col := b.Field(k).(*array.Int64Builder)
				col.Reserve(int(n))
				for i := start; i < start+n; i++ {
					col.UnsafeAppend(4*i + int64(k))
				}
			}
		case "strings":
			s := b.Field(0).(*array.StringBuilder)
			s.Reserve(int(n))
			s.ReserveData(int(n) * StringWidth)
			num := b.Field(1).(*array.Int64Builder)
			num.Reserve(int(n))
			for i := start; i < start+n; i++ {
				v := i
				for d := StringWidth - 1; d >= 0; d-- {
					digits[d] = byte('0' + v%10)
					v /= 10
				}
				s.BinaryBuilder.Append(digits)
				num.UnsafeAppend(i)
			}
		}
		out = append(out, b.NewRecordBatch())
		b.Release()
	}
	return out, schema, nil
}

func (c *client) put(ctx context.Context, cn *conn, path string) (*result, error) {
	if c.schema == nil {
		return nil, errors.New("put before prepare")
	}
	res := &result{}
	started := time.Now()
	stream, err := cn.flight.DoPut(ctx)
	if err != nil {
		return nil, err
	}
	w := flight.NewRecordWriter(stream, ipc.WithSchema(c.schema), ipc.WithAllocator(c.alloc))
	w.SetFlightDescriptor(&flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: strings.Split(path, "/")})
	for i, rec := range c.batches {
		var err error
		if i == 0 {
			// The put's options, as quiver and the Arrow C++ peer read them: JSON in the
			// app_metadata of the first message that carries any (here the first batch's:
			// the schema message goes before it).
			err = w.WriteWithAppMetadata(rec, []byte(`{"mode": "replace"}`))
		} else {
			err = w.Write(rec)
		}
		if err != nil {
			return nil, err
		}
		res.Batches++
		res.Rows += rec.NumRows()
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	if err := stream.CloseSend(); err != nil {
		return nil, err
	}
	for i := 0; ; i++ {
		if _, err := stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, err
		}
		if i > 1<<20 {
			return nil, errors.New("the server sent over a million PutResults")
		}
	}
	res.Seconds = time.Since(started).Seconds()
	return res, nil
}

func (c *client) handle(ctx context.Context, req *request) (any, error) {
	if req.Op == "prepare" {
		return c.prepare(req)
	}
	cn, err := c.conn(req.Addr)
	if err != nil {
		return nil, err
	}
	switch req.Op {
	case "get":
		return c.get(ctx, cn, req.Path)
	case "sql":
		return c.query(ctx, cn, req.Query)
	case "put":
		return c.put(ctx, cn, req.Path)
	case "latency":
		if req.Calls <= 0 || req.Calls > MaxLatencyCalls {
			return nil, fmt.Errorf("calls must be 1..%d", MaxLatencyCalls)
		}
		res := &result{}
		for i := 0; i < req.Calls; i++ {
			one, err := c.get(ctx, cn, req.Path)
			if err != nil {
				return nil, err
			}
			res.Latencies = append(res.Latencies, one.Seconds)
		}
		return res, nil
	}
	return nil, fmt.Errorf("unknown op %q", req.Op)
}

// prepare makes the batches the next puts send (0 rows: none, their memory released).
func (c *client) prepare(req *request) (any, error) {
	for _, rec := range c.batches {
		rec.Release()
	}
	c.batches, c.schema = nil, nil
	batches, schema, err := c.makeBatches(req.Kind, req.Rows, req.BatchRows)
	if err != nil {
		return nil, err
	}
	c.batches, c.schema = batches, schema
	return map[string]int{"batches": len(batches)}, nil
}

func main() {
	flag.Usage = func() { fmt.Fprintln(os.Stderr, "usage: quiver-bench-client < requests") }
	flag.Parse()
	c := &client{conns: map[string]*conn{}, alloc: memory.NewGoAllocator()}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := json.NewEncoder(os.Stdout)
	ctx := context.Background()
	fmt.Println(`{"ready": true}`)
	for in.Scan() {
		var req request
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			_ = out.Encode(map[string]string{"error": err.Error()})
			continue
		}
		if req.Op == "quit" {
			break
		}
		res, err := c.handle(ctx, &req)
		if err != nil {
			_ = out.Encode(map[string]string{"error": err.Error()})
			continue
		}
		_ = out.Encode(res)
	}
}
