//go:build race

package coding

// raceDetector: the race detector slows the coders about tenfold; the
// heap-measuring tests run in make test's second, plain go test instead.
const raceDetector = true
