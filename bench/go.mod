module github.com/edgecache/edge/bench

go 1.26.0

require (
	github.com/cespare/xxhash/v2 v2.3.0
	github.com/dgryski/go-jump v0.0.0-20170409065014-e1f439676b57
	github.com/edgecache/edge v0.0.0
	github.com/golang/groupcache v0.0.0-20241129210726-2c02b8208cf8
	github.com/serialx/hashring v0.0.0-20200727003509-22c0c7ab6b1b
)

require (
	github.com/hashicorp/golang-lru/v2 v2.0.7 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
)

replace github.com/edgecache/edge => ../
