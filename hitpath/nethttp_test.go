package hitpath

import (
	"bufio"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// recordingConn records what net/http does with a connection: reads in
// progress, read deadlines, and reads from two goroutines at once.
type recordingConn struct {
	net.Conn
	mu        sync.Mutex
	readsIn   int         // handlers that saw a read in progress while they ran
	deadlines []time.Time // read deadlines set
	reading   int         // reads in progress
	overlap   bool        // two reads at once
}

func (c *recordingConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	c.reading++
	if c.reading > 1 {
		c.overlap = true
	}
	c.mu.Unlock()
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.reading--
	c.mu.Unlock()
	return n, err
}

func (c *recordingConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadlines = append(c.deadlines, t)
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

type recordingListener struct {
	net.Listener
	conns chan *recordingConn
}

func (l recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	rc := &recordingConn{Conn: c}
	l.conns <- rc
	return rc, nil
}

// TestNetHTTPBehavioursTheLoopReliesOn checks, against the Go release in
// use, each net/http behaviour nethttp.go lists. It fails when a release
// changes one: the loop must then be revisited before the upgrade.
func TestNetHTTPBehavioursTheLoopReliesOn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rl := recordingListener{Listener: ln, conns: make(chan *recordingConn, 1)}
	var rc *recordingConn
	states := make(chan http.ConnState, 16)
	srv := &http.Server{
		ReadHeaderTimeout: 5 * time.Second,
		ConnState: func(_ net.Conn, st http.ConnState) {
			states <- st
		},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Wait for net/http's background read to start (an event, not
			// a fixed time: a busy machine may take long to schedule it).
			for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
				rc.mu.Lock()
				started := rc.reading > 0 // the connection goroutine is not reading: it runs us
				if started {
					rc.readsIn++
				}
				rc.mu.Unlock()
				if started {
					break
				}
			}
			_, _ = w.Write([]byte("ok"))
		}),
	}
	go func() { _ = srv.Serve(rl) }()
	defer srv.Close()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc = <-rl.conns
	br := bufio.NewReader(c)
	for i := range 2 {
		if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		resp.Body.Close()
		// (2) The connection is reported idle after the answer, before the
		// next request is read.
		deadline := time.After(5 * time.Second)
	wait:
		for {
			select {
			case st := <-states:
				if st == answeredState {
					break wait
				}
			case <-deadline:
				t.Fatalf("request %d: net/http did not report the kept connection %v after answering", i, answeredState)
			}
		}
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	// (1) A background read while the handler ran, ended by a deadline the
	// loop recognises as net/http's abort.
	if rc.readsIn == 0 {
		t.Error("net/http no longer reads the connection while a handler runs (background read)")
	}
	aborts := 0
	for _, d := range rc.deadlines {
		if isNetHTTPAbort(d) {
			aborts++
		}
	}
	if aborts == 0 {
		t.Errorf("net/http ended its background read without a deadline before %v (deadlines set: %v)", abortBefore, rc.deadlines)
	}
	// (3) Never two reads at once.
	if rc.overlap {
		t.Error("net/http read the connection from two goroutines at once")
	}
}
