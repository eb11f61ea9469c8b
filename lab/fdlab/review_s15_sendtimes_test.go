package fdlab

import (
	"bytes"
	"strings"
	"testing"
)

// Found by a review, now mended (Generate refuses a link whose sends span
// more than maxSendSpan): ReadSendTimes accepts any timestamps in [0, MaxInt64], and with
// --send-times and no --duration Generate sets Duration to MaxInt64, so a
// file whose sends span close to 2^63 ns passes every check; the receive
// time arrive*(1+drift)+skew then exceeds int64 and int64(recv) wraps (to
// -2^63 on amd64): a heartbeat received ~292 years before it was sent,
// written into the trace — the very failure the NaN guard in Generate was
// added for. The relative send time is checked against Duration, the
// receive time against nothing.
func TestS15HugeSendSpanOverflowsRecv(t *testing.T) {
	in := SendTimesHeader + "\n0,0,1\n1,9223372036854775000,9223372036854775001\n"
	st, err := ReadSendTimes(strings.NewReader(in))
	if err != nil {
		t.Skipf("rejected, fine: %v", err)
	}
	c := DefaultGenConfig()
	c.Duration = 0
	c.LossGood, c.GoodToBad, c.DriftPPM, c.SkewMax = 0, 0, 0, 0
	c.SendTimes = [][]SendTime{st}
	as, err := Generate(c)
	if err != nil {
		return // a clear error is fine
	}
	for _, a := range as {
		if a.Recv < a.Send || a.Recv < 0 {
			t.Errorf("accepted file, generated %+v: received before it was sent (int64 overflow)", a)
		}
	}
}

// HOLDS: malformed inputs never panic, never return partial data, and name
// the right line (CRLF, BOM, NUL, spaces inside fields, a very long line,
// a header repeated mid-file, a trailing comma, max values, equal stamps).
func TestS15ReadSendTimesMalformedHolds(t *testing.T) {
	h := SendTimesHeader + "\n"
	for _, c := range []struct{ in, want string }{
		{"\ufeff" + h + "0,1,2\n1,3,4\n", "line 1: header"},
		{h + "0,1,2\n1, 3,4\n", "line 3: numseq"},
		{h + "0,1,2\n1,3,4,\n", "line 3: 4 fields"},
		{h + "0,1,2\n\n\n" + SendTimesHeader + "\n", "line 5"},
		{h + "0,1,2\n1,3,4\x00\n", "line 3"},
		{h + "0,1,2\n" + strings.Repeat("9", 2<<20) + "\n", "line 3"},
		{h + "18446744073709551615,1,2\n0,3,4\n", "line 3: numseq 0 after 18446744073709551615"},
		{h + "18446744073709551616,1,2\n", "line 2: numseq"},
		{h + "0,9223372036854775807,9223372036854775807\n1,9223372036854775807,-1\n", "line 3: a send must end"},
	} {
		st, err := ReadSendTimes(strings.NewReader(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) || st != nil {
			t.Errorf("%.60q: %v, %d read; want an error with %q and nothing read", c.in, err, len(st), c.want)
		}
	}
	st, err := ReadSendTimes(strings.NewReader(h + "0,5,5\r\n7,5,5\r\n"))
	if err != nil || len(st) != 2 || st[1].Seq != 7 {
		t.Errorf("CRLF, equal stamps, a seq gap: %v %+v", err, st)
	}
	st, err = ReadSendTimes(bytes.NewReader([]byte(h + "0,0,0\n18446744073709551615,9223372036854775807,9223372036854775807\n")))
	if err != nil || len(st) != 2 {
		t.Errorf("max values: %v", err)
	}
}
