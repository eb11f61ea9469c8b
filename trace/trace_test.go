package trace

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/edgecache/edge/internal/prereq"
)

func readAll(t *testing.T, data []byte, f Format) ([]Request, error) {
	t.Helper()
	r, err := NewReader(bytes.NewReader(data), f)
	if err != nil {
		return nil, err
	}
	var out []Request
	for {
		req, err := r.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, req)
	}
}

func TestFormats(t *testing.T) {
	var b64 bytes.Buffer
	for _, v := range []int64{1, -2, 1 << 40} {
		_ = binary.Write(&b64, binary.BigEndian, v)
	}
	got, err := readAll(t, b64.Bytes(), Int64BE)
	if err != nil || len(got) != 3 || got[1].Key != "-2" || got[2].ID != 1<<40 {
		t.Fatalf("int64be: %v %v", got, err)
	}
	var b32 bytes.Buffer
	for _, v := range []int32{7, -1} {
		_ = binary.Write(&b32, binary.BigEndian, v)
	}
	got, err = readAll(t, b32.Bytes(), Int32BE)
	if err != nil || len(got) != 2 || got[1].Key != "-1" {
		t.Fatalf("int32be: %v %v", got, err)
	}
	got, err = readAll(t, []byte("1 10 100\n2 11 200\n\n# c\n3 10 100"), AdaptSize)
	if err != nil || len(got) != 3 || got[1].Size != 200 || got[2].Key != "10" {
		t.Fatalf("adaptsize: %v %v", got, err)
	}
	got, err = readAll(t, []byte("/a\n/b\n/a\n"), Lines)
	if err != nil || len(got) != 3 || got[0].ID != got[2].ID || got[0].ID == got[1].ID {
		t.Fatalf("lines: %v %v", got, err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte("x\ny\n"))
	zw.Close()
	if got, err = readAll(t, gz.Bytes(), Lines); err != nil || len(got) != 2 {
		t.Fatalf("gzip: %v %v", got, err)
	}
}

func TestMalformed(t *testing.T) {
	cases := []struct {
		data []byte
		f    Format
		want string
	}{
		{[]byte{0, 0, 0, 0, 0, 0, 0, 1, 9, 9}, Int64BE, "trailing bytes"},
		{[]byte{0, 0, 1}, Int32BE, "trailing bytes"},
		{[]byte("1 2\n"), AdaptSize, "fields"},
		{[]byte("1 x 3\n"), AdaptSize, "id"},
		{[]byte("1 2 -3\n"), AdaptSize, "size"},
		{[]byte{0xfd, '7', 'z', 'X', 'Z', 0, 1, 2, 3}, Lines, "xz"},
	}
	for _, tc := range cases {
		_, err := readAll(t, tc.data, tc.f)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q as %s: error %v, want one mentioning %q", tc.data, tc.f, err, tc.want)
		}
	}
	if _, err := ParseFormat("csv"); err == nil {
		t.Error("unknown format accepted")
	}
}

// TestSharedTraces reads the start of each shared trace, compressed.
func TestSharedTraces(t *testing.T) {
	for _, tc := range []struct {
		file string
		f    Format
	}{
		{"scarab-recs.trace.xz", Int64BE}, {"web07.trace.xz", Int32BE}, {"adaptsize-request.trace.xz", AdaptSize},
	} {
		path := "../../shared/traces/cache/" + tc.file
		if _, err := os.Stat(path); err != nil {
			prereq.Missing(t, "the shared traces", err)
		}
		reqs, err := ReadAll(path, tc.f, 1000)
		if err != nil || len(reqs) != 1000 {
			t.Errorf("%s: %d requests, %v", tc.file, len(reqs), err)
		}
	}
}

func FuzzReader(f *testing.F) {
	f.Add([]byte("1 2 3\n"), uint8(2))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1}, uint8(0))
	f.Add([]byte{0xfd, '7', 'z', 'X', 'Z', 0}, uint8(3))
	f.Add([]byte{0x1f, 0x8b, 8, 0}, uint8(3))
	formats := []Format{Int64BE, Int32BE, AdaptSize, Lines}
	f.Fuzz(func(t *testing.T, data []byte, which uint8) {
		r, err := NewReader(bytes.NewReader(data), formats[int(which)%len(formats)])
		if err != nil {
			return
		}
		for range 10000 {
			if _, err := r.Next(); err != nil {
				return
			}
		}
	})
}
