//go:build !race

package h2server

const raceDetector = false
