package proxy

import (
	"bytes"
	"io"
	"os"
	"strconv"
	"testing"
	"time"
)

// cutReader reads r, then fails with err where r ends.
type cutReader struct {
	r   io.Reader
	err error
}

func (c *cutReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err == io.EOF {
		return n, c.err
	}
	return n, err
}

// A second review of request buffering: every path a request body takes
// (memory, disk, cut short in each, the charge failing after the share is
// taken, the spool filling part way, the spool unable to open a file, the
// node overloaded once the body is in) gives back its shares, its budget
// and its spill.
func TestUploadSharesComeBackOnEveryPath(t *testing.T) {
	srv, _ := bodyEchoOrigin(t)
	h, dir := spoolProxy(t, srv, 4<<20, func(c *Config) { c.MaxInflight = 4 })
	check := func(name string) {
		t.Helper()
		h.Wait()
		time.Sleep(50 * time.Millisecond)
		if m, d, b, u, f := h.uploadMem.Load(), h.uploadDisk.Load(), h.buffered.Load(), h.spool.used.Load(), h.spool.files.Load(); m|d|b|u|f != 0 {
			t.Errorf("%s: uploadMem %d uploadDisk %d buffered %d spool %d in %d files", name, m, d, b, u, f)
		}
	}
	post := func(name string, checkNow bool, declared int64, rd io.Reader, want int) {
		t.Helper()
		w := <-upload(h, "/"+name, declared, rd)
		if w.Code != want {
			t.Errorf("%s: %d, want %d (%s)", name, w.Code, want, w.Body.String())
		}
		if checkNow {
			check(name)
		}
	}
	small, large := patterned(10<<10, 1), patterned(300<<10, 2)
	post("mem", true, int64(len(small)), bytes.NewReader(small), 200)
	post("mem-cut", true, int64(len(small)), &cutReader{bytes.NewReader(small[:100]), io.ErrUnexpectedEOF}, 400)
	post("disk", true, int64(len(large)), bytes.NewReader(large), 200)
	post("disk-cut", true, int64(len(large)), &cutReader{bytes.NewReader(large[:200<<10]), io.ErrUnexpectedEOF}, 400)
	h.buffered.Add(h.cfg.MaxBufferedBytes) // the charge fails after the share is taken
	post("mem-nocharge", false, int64(len(small)), bytes.NewReader(small), 200)
	h.buffered.Add(-h.cfg.MaxBufferedBytes)
	check("mem-nocharge")
	others := h.spool.budget - 100<<10 // the spool fills part way
	h.spool.used.Add(others)
	post("full-ok", false, int64(len(large)), bytes.NewReader(large), 200)
	w := <-upload(h, "/full-cut", int64(len(large)), &cutReader{bytes.NewReader(large[:250<<10]), io.ErrUnexpectedEOF})
	t.Logf("cut short after the spool filled: %d", w.Code) // the transport's length mismatch: 502
	h.spool.used.Add(-others)
	check("full-cut")
	if err := os.RemoveAll(dir); err != nil { // the spool cannot open a file
		t.Fatal(err)
	}
	post("open-err", true, int64(len(large)), bytes.NewReader(large), 200)
	taken := takeEverySlot(h) // overloaded once the body is in
	for i := range 3 {
		if w := <-upload(h, "/ov"+strconv.Itoa(i), int64(len(small)), bytes.NewReader(small)); w.Code != 503 {
			t.Errorf("overloaded: %d, want 503", w.Code)
		}
	}
	for _, slot := range taken {
		slot.release()
	}
	check("overload")
}
