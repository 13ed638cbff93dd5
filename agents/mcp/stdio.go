package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/coagent/coagent/intents"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// StdioTransport is the transport of `coagent mcp` over stdio:
// newline-delimited JSON-RPC on Reader and Writer, as the go-sdk's
// IOTransport, except that a line which is not one JSON-RPC message is
// answered with the JSON-RPC error and the session reads on. The go-sdk's
// transport ends the session at such a line (malformed JSON, a batch, an
// object as id, nesting deeper than its decoder takes), and with it the
// renewal of the session's transactions: one bad line from a host would
// cost the agent its claims.
//
// Batches are refused (-32600): MCP 2025-06-18 removed them, and none of
// this server's hosts sends them. The caller keeps owning Reader and
// Writer: the transport closes neither.
type StdioTransport struct {
	Reader io.Reader
	Writer io.Writer
	// MaxLineLength bounds one line; a longer one is refused (-32700) and
	// skipped. The default is sdk.DefaultMaxLineLength (16 MiB).
	MaxLineLength int
	// Logger receives a note for each line refused. The default discards
	// them.
	Logger *slog.Logger
}

var _ sdk.Transport = (*StdioTransport)(nil)

// Connect implements sdk.Transport.
func (t *StdioTransport) Connect(ctx context.Context) (sdk.Connection, error) {
	if t.Reader == nil || t.Writer == nil {
		return nil, errors.New("mcp: StdioTransport needs a Reader and a Writer")
	}
	max := t.MaxLineLength
	if max <= 0 {
		max = sdk.DefaultMaxLineLength
	}
	log := t.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	w := &lockedWriter{w: t.Writer}
	f := &lineFilter{r: bufio.NewReader(t.Reader), w: w, max: max, log: log}
	// The filter passes on only lines it has checked, each at most max
	// bytes: the go-sdk's own bound, which ends the session, is off.
	return (&sdk.IOTransport{Reader: f, Writer: w, MaxLineLength: -1}).Connect(ctx)
}

// lockedWriter serializes whole writes: the go-sdk writes each message in
// one Write, and the filter's error answers go to the same stream, so a
// line of one never splits a line of the other.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (*lockedWriter) Close() error { return nil }

// lineFilter is the reader the go-sdk's transport reads: the input's
// lines that are one JSON-RPC message each, and nothing of the others,
// which it answers itself. Read is called by one goroutine only (the
// go-sdk's reader).
type lineFilter struct {
	r       *bufio.Reader
	w       io.Writer
	max     int
	log     *slog.Logger
	pending []byte // the rest of a checked line, for the next Read
	err     error  // the input's error, once it is reached
}

func (f *lineFilter) Read(p []byte) (int, error) {
	for len(f.pending) == 0 {
		if f.err != nil {
			return 0, f.err
		}
		line, tooLong, err := f.line()
		f.err = err
		switch {
		case tooLong:
			f.refuse(jsonrpc.CodeParseError, fmt.Sprintf("parse error: a line longer than %d bytes", f.max), nil, nil)
		case len(bytes.TrimSpace(line)) > 0:
			if code, msg, id := check(line); code != 0 {
				f.refuse(code, msg, id, line)
				continue
			}
			f.pending = append(line, '\n')
		}
	}
	n := copy(p, f.pending)
	f.pending = f.pending[n:]
	return n, nil
}

// Close implements io.Closer for the go-sdk; the caller owns the input.
func (*lineFilter) Close() error { return nil }

// line reads the next line without its end; tooLong says it was longer
// than f.max (then line is nil and the rest of it was read and dropped).
// err is the input's error after the last line (io.EOF at its end).
func (f *lineFilter) line() (line []byte, tooLong bool, err error) {
	var buf []byte
	for {
		chunk, err := f.r.ReadSlice('\n')
		if !tooLong {
			if len(buf)+len(chunk) > f.max+1 { // +1: the newline
				tooLong, buf = true, nil
			} else {
				buf = append(buf, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimRight(buf, "\r\n"), tooLong, err
	}
}

// check says whether line is one JSON-RPC message the go-sdk can take:
// code 0 if it is, else the JSON-RPC error code, its message and the id to
// answer with (nil: null).
func check(line []byte) (code int, msg string, id any) {
	var raw json.RawMessage
	// encoding/json bounds nesting (10,000 levels): a deeper line is a
	// syntax error here rather than a stack the decoders behind must hold.
	if err := json.Unmarshal(line, &raw); err != nil {
		return jsonrpc.CodeParseError, "parse error: " + err.Error(), nil
	}
	switch bytes.TrimSpace(line)[0] {
	case '[':
		return jsonrpc.CodeInvalidRequest, "invalid request: a batch (JSON array) is not served; send one message per line", nil
	case '{':
	default:
		return jsonrpc.CodeInvalidRequest, "invalid request: a JSON-RPC message is a JSON object", nil
	}
	if _, err := jsonrpc.DecodeMessage(line); err != nil {
		return jsonrpc.CodeInvalidRequest, "invalid request: " + err.Error(), requestID(line)
	}
	return 0, "", nil
}

// requestID is the id of a request the error answers, when it has a
// method and an id a client can match (a string or a number); else nil,
// answered as null as JSON-RPC 2.0 §5 says.
func requestID(line []byte) any {
	var m struct {
		Method *json.RawMessage `json:"method"`
		ID     any              `json:"id"`
	}
	if json.Unmarshal(line, &m) != nil || m.Method == nil {
		return nil
	}
	switch m.ID.(type) {
	case string, float64:
		return m.ID
	}
	return nil
}

// refuse answers a line that is not a message with the JSON-RPC error.
func (f *lineFilter) refuse(code int, msg string, id any, line []byte) {
	f.log.Warn("refused a JSON-RPC line", "code", code, "error", msg, "line", intents.Clip(string(line), 200))
	answer, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id,
		"error": map[string]any{"code": code, "message": intents.Clip(msg, 500)}})
	if err != nil {
		f.log.Warn("encoding the answer to a refused line failed", "err", err)
		return
	}
	if _, err := f.w.Write(append(answer, '\n')); err != nil {
		f.log.Warn("answering a refused line failed", "err", err)
	}
}
