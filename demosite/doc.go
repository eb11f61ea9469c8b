// Package demosite is the synthetic origin that `make run`, the tests and
// the benchmarks put behind the cache: deterministic pages with a size mix,
// one page family per caching case (max-age, no-store, Vary, Set-Cookie,
// stale-while-revalidate, …), large objects and a request counter. It is a
// fixture and a demo, not part of a node.
package demosite
