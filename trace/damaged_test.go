package trace

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"io"
	"strings"
	"testing"
)

func readAllFrom(t *testing.T, data []byte, f Format) (int, error) {
	t.Helper()
	r, err := NewReader(bytes.NewReader(data), f)
	if err != nil {
		return 0, err
	}
	n := 0
	for {
		_, err := r.Next()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n++
	}
}

// TestDamagedCompressionIsNamed: a cut .gz, or garbage after a whole one,
// is reported as the compression's fault, not as a key cut short; a binary
// trace read as text is refused, not read as garbage keys.
func TestDamagedCompressionIsNamed(t *testing.T) {
	var raw bytes.Buffer
	for i := range 20000 {
		_ = binary.Write(&raw, binary.BigEndian, int64(i*7919))
	}
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	_, _ = w.Write(raw.Bytes())
	_ = w.Close()
	if n, err := readAllFrom(t, gz.Bytes(), Int64BE); err != nil || n != 20000 {
		t.Fatalf("the whole .gz: %d keys, %v", n, err)
	}
	cut := gz.Bytes()[:gz.Len()/2]
	if _, err := readAllFrom(t, cut, Int64BE); err == nil || !strings.Contains(err.Error(), "gzip stream is damaged or cut short") {
		t.Errorf("a cut .gz: %v", err)
	}
	junk := append(append([]byte(nil), gz.Bytes()...), "trailing junk"...)
	if _, err := readAllFrom(t, junk, Int64BE); err == nil || !strings.Contains(err.Error(), "gzip stream") {
		t.Errorf("junk after a .gz: %v", err)
	}
	// A plain file that ends mid-key is still reported as such.
	if _, err := readAllFrom(t, raw.Bytes()[:raw.Len()-3], Int64BE); err == nil || !strings.Contains(err.Error(), "trailing bytes") {
		t.Errorf("a plain file ending mid-key: %v", err)
	}
	if _, err := readAllFrom(t, raw.Bytes(), Lines); err == nil || !strings.Contains(err.Error(), "binary data") {
		t.Errorf("a binary trace read as lines: %v", err)
	}
}
