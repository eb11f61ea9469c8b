package routing

import (
	"strconv"
)

func nodeIDs(n int) []Member {
	ms := make([]Member, n)
	for i := range ms {
		ms[i] = Member{ID: "node-" + strconv.Itoa(i)}
	}
	return ms
}

func simKeys(n int) []uint64 {
	ks := make([]uint64, n)
	for i := range ks {
		ks[i] = KeyHash("key-" + strconv.Itoa(i))
	}
	return ks
}
