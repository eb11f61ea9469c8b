//go:build race

package proxy

// raceDetector: the race detector slows coding and copying tenfold; the
// heaviest tests do less under it.
const raceDetector = true
