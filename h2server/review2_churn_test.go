package h2server

import (
	"bytes"
	"math/rand"
	"net/http"
	"sync/atomic"
	"testing"

	"golang.org/x/net/http2"

	"github.com/edgecache/edge/hitpath"
)

// SETTINGS that change the window (0 to 1 MiB) and the frame size (16 KiB to
// 1 MiB) on about a quarter of DATA frames, six streams at once on both
// paths: every body arrives whole, no frame exceeds what the client allowed
// once it had the ACK (a second hostile review; it fails at once without
// the reservation check).
func TestSettingsChurnKeepsWindowsAndFrames(t *testing.T) {
	body := bytes.Repeat([]byte("abcdefg"), 300_000/7*3)
	s := &Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for p := body; len(p) > 0; {
				n := min(len(p), 50_000)
				_, _ = w.Write(p[:n])
				p = p[n:]
			}
		}),
		Hits:   answerer{body: body, n: new(atomic.Int64)},
		Fields: hitpath.NewFields(hitpath.Config{}),
	}
	addr := serve(t, s)
	// Each round is its own seed of settings churn; under the race
	// detector 12 of the 40 (24 s of make test's run for all 40).
	rounds := 40
	if raceDetector {
		rounds = 12
	}
	for round := range rounds {
		rng := rand.New(rand.NewSource(int64(round)))
		rc := dialRaw(t, addr)
		rc.fr.SetMaxReadFrameSize(1 << 24)
		type set struct{ win, frame int64 }
		cur := set{65535, 16384}
		pending := []set{cur}
		connWin := int64(65535)
		const nst = 6
		stWin := map[uint32]int64{}
		got := map[uint32]*bytes.Buffer{}
		ended := 0
		for i := uint32(0); i < nst; i++ {
			id := 2*i + 1
			stWin[id] = cur.win
			got[id] = new(bytes.Buffer)
			rc.headers(id, true, get([]string{"/handler", "/hit"}[i%2])...)
		}
		unacked := map[uint32]int64{}
		for ended < nst {
			f, err := rc.fr.ReadFrame()
			if err != nil {
				t.Fatalf("round %d: %v (got %d ended)", round, err, ended)
			}
			switch f := f.(type) {
			case *http2.GoAwayFrame:
				t.Fatalf("round %d: GOAWAY %v", round, f.ErrCode)
			case *http2.RSTStreamFrame:
				t.Fatalf("round %d: RST %d %v", round, f.StreamID, f.ErrCode)
			case *http2.SettingsFrame:
				if f.IsAck() {
					ns := pending[0]
					pending = pending[1:]
					for id := range stWin {
						stWin[id] += ns.win - cur.win
					}
					cur = ns
					if cur.win <= 1000 && len(pending) == 0 {
						ns := set{65535, cur.frame}
						pending = append(pending, ns)
						_ = rc.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(ns.win)})
					}
				}
			case *http2.DataFrame:
				n := int64(len(f.Data()))
				if n > cur.frame && (len(pending) == 0 || n > pending[0].frame) {
					t.Errorf("round %d: frame of %d > max %d", round, n, cur.frame)
				}
				if len(pending) == 0 && n > cur.frame {
					t.Errorf("round %d: frame of %d after ACK > max %d", round, n, cur.frame)
				}
				connWin -= n
				stWin[f.StreamID] -= n
				if connWin < 0 || stWin[f.StreamID] < 0 {
					t.Fatalf("round %d: window overrun conn %d stream %d: %d", round, connWin, f.StreamID, stWin[f.StreamID])
				}
				got[f.StreamID].Write(f.Data())
				if f.StreamEnded() {
					ended++
				}
				unacked[f.StreamID] += n
				if rng.Intn(3) == 0 || connWin < 200000 || stWin[f.StreamID] < 40000 {
					for id, u := range unacked {
						if u > 0 {
							_ = rc.fr.WriteWindowUpdate(id, uint32(u))
							stWin[id] += u
							_ = rc.fr.WriteWindowUpdate(0, uint32(u))
							connWin += u
						}
						delete(unacked, id)
					}
				}
				if rng.Intn(4) == 0 {
					ns := set{[]int64{0, 1, 1000, 16384, 65535, 300000, 1 << 20}[rng.Intn(7)], []int64{16384, 16385, 40000, 1 << 20}[rng.Intn(4)]}
					pending = append(pending, ns)
					_ = rc.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(ns.win)}, http2.Setting{ID: http2.SettingMaxFrameSize, Val: uint32(ns.frame)})
				}
				// never leave all windows closed forever
				if cur.win <= 1000 && len(pending) == 0 && rng.Intn(2) == 0 {
					ns := set{65535, cur.frame}
					pending = append(pending, ns)
					_ = rc.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(ns.win)})
				}
			}
			// stuck guard: if every stream window is ≤ 0 and none pending, reopen
		}
		for id, b := range got {
			if !bytes.Equal(b.Bytes(), body) {
				t.Errorf("round %d stream %d: %d bytes, want %d", round, id, b.Len(), len(body))
			}
		}
		rc.nc.Close()
	}

}
