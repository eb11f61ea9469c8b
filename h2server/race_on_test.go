//go:build race

package h2server

// raceDetector: the race detector slows framing and copying tenfold; the
// heaviest tests do less under it (make test), all of it without (go test).
const raceDetector = true
