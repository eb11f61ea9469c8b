//go:build !race

package coding

const raceDetector = false
