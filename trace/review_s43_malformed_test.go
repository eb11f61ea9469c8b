package trace

// Review s43: malformed traces. Each test says whether it demonstrates a
// defect (failed before 2026-12-07) or pins a property that holds.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

type s43Step struct {
	key string // a request's Key, or "" for an error
	err string // a substring of the error
}

// s43Read reads every entry, continuing past errors (as Next promises the
// caller may), and records each request or error.
func s43Read(t *testing.T, data []byte, f Format) []s43Step {
	t.Helper()
	r, err := NewReader(bytes.NewReader(data), f)
	if err != nil {
		return []s43Step{{err: "NewReader: " + err.Error()}}
	}
	var out []s43Step
	for range 1000 {
		req, err := r.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			out = append(out, s43Step{err: err.Error()})
			if f == Int64BE || f == Int32BE {
				return out
			}
			continue
		}
		out = append(out, s43Step{key: req.Key})
	}
	t.Fatal("no end after 1000 entries")
	return nil
}

// TestS43MalformedTextNamesTheLineAndLosesNothing — HOLDS (pins). Each
// malformed text line is an error naming its physical line (blank and
// comment lines counted), and the lines after it still read; CRLF endings
// are accepted; huge, negative and non-numeric ids and sizes, wrong field
// counts, a line cut at EOF and NUL bytes are all named.
func TestS43MalformedTextNamesTheLineAndLosesNothing(t *testing.T) {
	cases := []struct {
		name string
		in   string
		f    Format
		want []s43Step
	}{
		{"crlf", "1 10 100\r\n2 11 200\r\n", AdaptSize, []s43Step{{key: "10"}, {key: "11"}}},
		{"crlf lines", "/a\r\n/b\r\n", Lines, []s43Step{{key: "/a"}, {key: "/b"}}},
		{"two fields", "1 10 100\n1 2\n3 12 5\n", AdaptSize, []s43Step{{key: "10"}, {err: "line 2: want \"time id size\", got 2 fields"}, {key: "12"}}},
		{"four fields", "1 10 100 7\n3 12 5\n", AdaptSize, []s43Step{{err: "line 1: want \"time id size\", got 4 fields"}, {key: "12"}}},
		{"id overflow", "# h\n\n1 18446744073709551616 5\n2 3 4\n", AdaptSize, []s43Step{{err: "line 3: id \"18446744073709551616\""}, {key: "3"}}},
		{"id negative", "1 -3 5\n", AdaptSize, []s43Step{{err: "line 1: id \"-3\""}}},
		{"size overflow", "1 3 9223372036854775808\n", AdaptSize, []s43Step{{err: "line 1: size"}}},
		{"size negative", "1 3 -1\n", AdaptSize, []s43Step{{err: "line 1: size \"-1\""}}},
		{"size float", "1 3 1.5\n", AdaptSize, []s43Step{{err: "line 1: size \"1.5\""}}},
		{"cut at EOF", "1 10 100\n2 11", AdaptSize, []s43Step{{key: "10"}, {err: "line 2: want"}}},
		{"NUL", "1 10 100\n\x00\x00\x01\n2 11 7\n", AdaptSize, []s43Step{{key: "10"}, {err: "line 2: binary data"}, {key: "11"}}},
		{"NUL lines", "/a\n/b\x00\n/c\n", Lines, []s43Step{{key: "/a"}, {err: "line 2: binary data"}, {key: "/c"}}},
		{"empty", "", AdaptSize, nil},
		{"empty lines", "", Lines, nil},
	}
	for _, tc := range cases {
		got := s43Read(t, []byte(tc.in), tc.f)
		ok := len(got) == len(tc.want)
		for i := 0; ok && i < len(got); i++ {
			ok = got[i].key == tc.want[i].key && (tc.want[i].err == "") == (got[i].err == "") && strings.Contains(got[i].err, tc.want[i].err)
		}
		if !ok {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
	for _, f := range []Format{Int64BE, Int32BE} {
		if got := s43Read(t, nil, f); len(got) != 0 {
			t.Errorf("empty %s: %+v", f, got)
		}
	}
	if got := s43Read(t, []byte{0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0}, Int32BE); len(got) != 3 || got[2].err == "" || !strings.Contains(got[2].err, "entry 3: 3 trailing bytes") {
		t.Errorf("int32be cut: %+v", got)
	}
}

// TestS43AdaptSizeTimeIsChecked — DEFECT (failed before 2026-12-07, low). The time
// column is never parsed (trace.go:142-154 checks only id and size), so a
// line of garbage with three fields is a request: "x 10 100", "\xff\xfe 7
// 1" and "-- 1 2" all read without an error.
func TestS43AdaptSizeTimeIsChecked(t *testing.T) {
	for _, in := range []string{"x 10 100\n", "\xff\xfe 7 1\n", "-- 1 2\n"} {
		got := s43Read(t, []byte(in), AdaptSize)
		if len(got) != 1 || got[0].err == "" {
			t.Errorf("%q: %+v, want an error naming line 1's time", in, got)
		}
	}
}

// TestS43BinaryKeyIsNotTakenForGzip — DEFECT (failed before 2026-12-07, low).
// Compression is sniffed from the first bytes (trace.go:84-98), but an
// int32be or int64be trace has no header: one whose first key begins
// 0x1f 0x8b (int32 keys 529,203,200–529,268,735; 1 in 65,536 random
// int64 keys) is taken for gzip and the whole trace is refused.
func TestS43BinaryKeyIsNotTakenForGzip(t *testing.T) {
	var b bytes.Buffer
	for _, k := range []int32{0x1f8b0800, 1, 2} {
		_ = binary.Write(&b, binary.BigEndian, k)
	}
	got := s43Read(t, b.Bytes(), Int32BE)
	if len(got) != 3 || got[0].key != "529205248" {
		t.Errorf("int32be trace whose first key is 529205248: %+v, want 3 keys", got)
	}
}

// TestS43LongLineIsBounded — DEFECT (failed before 2026-12-07). Text lines are read with
// bufio.Reader.ReadString (trace.go:124), which has no limit: a 64 MiB
// line without a newline is returned as one Lines key, and costs
// hundreds of MiB of allocation; a 1 GB line (a binary or corrupt file read
// as text) would need several GB. Want: an error naming the line once it
// passes a sane bound (say 1 MiB), then the next line.
func TestS43LongLineIsBounded(t *testing.T) {
	const n = 64 << 20
	data := append(bytes.Repeat([]byte("a"), n), "\n/next\n"...)
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	r, _ := NewReader(bytes.NewReader(data), Lines)
	req, err := r.Next()
	runtime.ReadMemStats(&m1)
	t.Logf("a %d MiB line: key of %d bytes, err %v, %d MiB allocated", n>>20, len(req.Key), err, (m1.TotalAlloc-m0.TotalAlloc)>>20)
	if err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("a %d MiB line accepted as a key (err %v)", n>>20, err)
	}
	if req, err := r.Next(); err != nil || req.Key != "/next" {
		t.Errorf("after the long line: %+v %v", req, err)
	}
}

// TestS43BinaryRoundTrip — HOLDS (pins). Keys written as
// scripts/synthtrace writes them (big-endian, 8 bytes; and 4 bytes for
// int32be) read back exactly, extremes included; the file's end is EOF.
func TestS43BinaryRoundTrip(t *testing.T) {
	k64 := []int64{0, 1, -1, math.MaxInt64, math.MinInt64, 1 << 40}
	var b bytes.Buffer
	var w [8]byte
	for _, k := range k64 {
		binary.BigEndian.PutUint64(w[:], uint64(k))
		b.Write(w[:])
	}
	r, _ := NewReader(&b, Int64BE)
	for _, k := range k64 {
		req, err := r.Next()
		if err != nil || req.ID != uint64(k) || req.Key != itoa(k) {
			t.Errorf("int64be %d: %+v %v", k, req, err)
		}
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Errorf("int64be end: %v", err)
	}
	k32 := []int32{0, -1, math.MaxInt32, math.MinInt32}
	b.Reset()
	for _, k := range k32 {
		_ = binary.Write(&b, binary.BigEndian, k)
	}
	r, _ = NewReader(&b, Int32BE)
	for _, k := range k32 {
		req, err := r.Next()
		if err != nil || req.ID != uint64(int64(k)) || req.Key != itoa(int64(k)) {
			t.Errorf("int32be %d: %+v %v", k, req, err)
		}
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
