package fdlab

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

// sendTimesFile writes a sentinterval.csv for a sender that sends every
// 100 ms with a little lateness, skips numbers in skip, and stalls for
// stall before heartbeat stallAt (sending the ones due meanwhile late).
func sendTimesFile(n int, skip map[int]bool, stallAt int, stall time.Duration) string {
	var b strings.Builder
	b.WriteString(SendTimesHeader + "\n")
	const origin = 47816110278831392 // a sender's monotonic clock is far from 0
	lateBy := int64(0)
	for i := range n {
		if i == stallAt {
			lateBy = int64(stall)
		}
		if skip[i] {
			continue
		}
		start := origin + int64(i)*int64(100*time.Millisecond) + int64(i%7)*50_000 + lateBy
		fmt.Fprintf(&b, "%d,%d,%d\n", i, start, start+130_000)
	}
	return b.String()
}

func TestReadSendTimes(t *testing.T) {
	st, err := ReadSendTimes(strings.NewReader(sendTimesFile(5, map[int]bool{2: true}, -1, 0)))
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 4 || st[2].Seq != 3 || st[1].Send-st[0].Send != int64(100*time.Millisecond)+50_000 {
		t.Fatalf("read %+v", st)
	}
}

// Malformed files: each an error naming its line and reason, none read in part.
func TestReadSendTimesMalformed(t *testing.T) {
	h := SendTimesHeader + "\n"
	for _, c := range []struct{ in, want string }{
		{"", "empty"},
		{"numseq,start,end\n0,1,2\n1,3,4\n", "line 1: header"},
		{h, "0 heartbeats"},
		{h + "0,1,2\n", "1 heartbeats"},
		{h + "0,1,2\n1,3\n", "line 3: 2 fields"},
		{h + "0,1,2\n1,3,4,5\n", "line 3: 4 fields"},
		{h + "0,1,2\nx,3,4\n", "line 3: numseq and both timestamps must be integers"},
		{h + "0,1,2\n1,3.5,4\n", "line 3: numseq and both timestamps must be integers"},
		{h + "0,1,2\n-1,3,4\n", "line 3: numseq and both timestamps must be integers"},
		{h + "0,5,2\n1,6,7\n", "line 2: a send must end (2) no earlier than it began (5)"},
		{h + "0,-5,2\n1,6,7\n", "line 2: a send must end"},
		{h + "3,1,2\n3,5,6\n", "line 3: numseq 3 after 3"},
		{h + "3,1,2\n2,5,6\n", "line 3: numseq 2 after 3"},
		{h + "0,10,12\n1,9,12\n", "line 3: the clock ran back"},
		{h + "0,1,2\n1,99999999999999999999,3\n", "line 3: numseq and both timestamps must be integers"},
	} {
		st, err := ReadSendTimes(strings.NewReader(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v (%d read), want an error with %q", c.in, err, len(st), c.want)
		}
		if err != nil && st != nil {
			t.Errorf("%q: an error and %d heartbeats", c.in, len(st))
		}
	}
	// Blank lines and surrounding spaces are not rows.
	if st, err := ReadSendTimes(strings.NewReader(" " + h + "0,1,2\n\n 1,3,4 \n\n")); err != nil || len(st) != 2 {
		t.Errorf("blank lines: %v, %d read", err, len(st))
	}
}

// A trace from real send times keeps the sender's own timing (its
// lateness, its stall, the numbers it skipped), one link per file, and
// models the WAN on top as a generated trace does.
func TestGenerateFromSendTimes(t *testing.T) {
	var files [][]SendTime
	for i, spec := range []struct {
		skip  map[int]bool
		stall int
	}{{map[int]bool{10: true, 11: true}, 300}, {nil, -1}} {
		st, err := ReadSendTimes(strings.NewReader(sendTimesFile(600, spec.skip, spec.stall, time.Second)))
		if err != nil {
			t.Fatalf("file %d: %v", i, err)
		}
		files = append(files, st)
	}
	c := DefaultGenConfig()
	c.Duration, c.Links = 0, 99 // the files decide both
	c.LossGood, c.GoodToBad = 0, 0
	c.SendTimes = files
	as, err := Generate(c)
	if err != nil {
		t.Fatal(err)
	}
	bySite := map[string][]Arrival{}
	for _, a := range as {
		bySite[a.Site] = append(bySite[a.Site], a)
		if a.Recv-a.Send < 0 && a.Delay <= 0 {
			t.Fatalf("%+v: received before it was sent", a)
		}
	}
	if len(bySite) != 2 || len(bySite["link1"]) != 598 || len(bySite["link2"]) != 600 {
		t.Fatalf("links %d, heartbeats %d and %d; want 2 links of 598 and 600", len(bySite), len(bySite["link1"]), len(bySite["link2"]))
	}
	sent := map[uint64]int64{}
	for _, a := range bySite["link1"] {
		sent[a.Seq] = a.Send
	}
	if _, ok := sent[10]; ok {
		t.Error("a number the sender skipped was received")
	}
	if sent[0] != 0 || sent[1] != int64(100*time.Millisecond)+50_000 {
		t.Errorf("send times %d, %d: want the file's, from its first heartbeat", sent[0], sent[1])
	}
	if gap := sent[300] - sent[299]; gap < int64(time.Second) {
		t.Errorf("the sender's 1 s stall became a %v gap", time.Duration(gap))
	}
	// --duration cuts each link.
	c.Duration = 10 * time.Second
	cut, err := Generate(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cut {
		if a.Send >= int64(10*time.Second) {
			t.Fatalf("%+v: sent after the 10 s asked for", a)
		}
	}
	c.SendTimes = [][]SendTime{files[0][:1]}
	if _, err := Generate(c); err == nil {
		t.Error("a link of one heartbeat was accepted")
	}
}

func FuzzReadSendTimes(f *testing.F) {
	f.Add([]byte(sendTimesFile(4, nil, -1, 0)))
	f.Add([]byte(SendTimesHeader + "\n0,1,2\n1,1,1\n"))
	f.Add([]byte(SendTimesHeader + "\n0,1,2\n\n2,3\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := ReadSendTimes(bytes.NewReader(b))
		if err != nil {
			return
		}
		if len(st) < 2 {
			t.Fatalf("accepted %d heartbeats", len(st))
		}
		for i := 1; i < len(st); i++ {
			if st[i].Seq <= st[i-1].Seq || st[i].Send < st[i-1].Send || st[i].Send < 0 {
				t.Fatalf("accepted %+v after %+v", st[i], st[i-1])
			}
		}
	})
}
