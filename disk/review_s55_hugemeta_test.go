package disk

import (
	"context"
	"strings"
	"testing"
	"time"
)

// encode writes metadata of any length, while every reader (parseHeader:
// Lookup and the start's scan) refuses more than maxMeta (1 MiB) as an
// impossible length. A response with more than 1 MiB of header fields
// (the origin client keeps net/http's 10 MiB response header limit;
// nothing in the proxy bounds a stored header's size) is written, counted
// as a write, and then read back as a corrupt record: each disk read of it
// counts edge_disk_errors_total{kind="corrupt"} and logs a warning, and
// the start after a crash counts it as a damaged file. Expected: a record
// the tier cannot read back is not written (dropped and counted as such).
func TestS55DiskRecordWithMetadataOverTheReadLimitIsWrittenThenReadAsCorrupt(t *testing.T) {
	dir := t.TempDir()
	tier := open(t, dir, 64<<20, nil)
	r := rec("http://a.test/p", "body")
	r.Header["Content-Security-Policy"] = []string{strings.Repeat("x", maxMeta)}
	tier.Write(r)
	drain(t, tier)
	got := get(tier, "http://a.test/p")
	st := tier.Stats()
	if st.Writes != 0 || st.Corrupt != 0 {
		t.Errorf("a record over the metadata limit: %d written, then read %q with %d corrupt (last error %q); want it never written",
			st.Writes, got, st.Corrupt, st.LastError)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tier.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
