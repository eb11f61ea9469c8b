package h2server

import (
	"strings"
	"testing"

	"golang.org/x/net/http2/hpack"
)

// A long value written around the encoder (writeField) decodes as the
// field it is, and the dynamic table stays in step with the peer's
// across blocks that mix it with indexed fields.
func TestWriteFieldLongValuesRoundTrip(t *testing.T) {
	c := &conn{}
	c.henc = hpack.NewEncoder(&c.hbuf)
	dec := hpack.NewDecoder(4096, nil)
	long := strings.Repeat("v", 200_000)
	for block := range 3 {
		fields := []hpack.HeaderField{
			{Name: ":status", Value: "200"},
			{Name: "content-type", Value: "text/html"},
			{Name: "x-big", Value: long},
			{Name: "x-small", Value: "s"},
			{Name: strings.Repeat("n", 130), Value: strings.Repeat("w", internMaxBytes+1)}, // name and value lengths past one prefix byte
			{Name: "cache-control", Value: "max-age=60"},
		}
		c.hbuf.Reset()
		for _, hf := range fields {
			c.writeField(hf)
		}
		got, err := dec.DecodeFull(c.hbuf.Bytes())
		if err != nil {
			t.Fatalf("block %d: %v", block, err)
		}
		if len(got) != len(fields) {
			t.Fatalf("block %d: %d fields, want %d", block, len(got), len(fields))
		}
		for i := range fields {
			if got[i].Name != fields[i].Name || got[i].Value != fields[i].Value {
				t.Errorf("block %d field %d: %q=%.20q, want %q=%.20q", block, i, got[i].Name, got[i].Value, fields[i].Name, fields[i].Value)
			}
		}
	}
}
