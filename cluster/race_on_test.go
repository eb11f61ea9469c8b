//go:build race

package cluster

// raceDetector reports whether the tests were built with -race.
const raceDetector = true
