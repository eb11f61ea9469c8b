//go:build race

package rules

// raceEnabled: under the race detector sync.Pool drops what it holds at
// random, so regexp's pooled machines are made again: allocation counts
// read higher than in a build without it.
const raceEnabled = true
