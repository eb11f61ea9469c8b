package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/memberlist"

	"github.com/edgecache/edge/cluster/wire"
)

// Found by session 22's review, now mended: metadata version 2 was
// refused by every node of the previous release, so during a rolling
// upgrade each upgraded node was "left out of the ring" of every node not
// yet upgraded. s22DecodeMetaV1 is decodeMeta as released at 0d4dc74,
// copied verbatim with its constants: what an older node runs on every
// member's metadata. Each node now tells what it reads in memberlist's
// delegate version fields (DMax), and sends version 1, unstamped, while a
// member that reads only version 1 is in its view (memberView.allRead).
func TestS22AnUpgradedNodesMetadataIsReadByThePreviousRelease(t *testing.T) {
	c := &Cluster{cfg: Config{NodeID: "new", Region: "eu"}, incarnation: 7}
	c.metaEpoch.Store(3)
	c.mlView.set(&memberlist.Node{Name: "new", DMax: metaVersion})
	c.mlView.set(&memberlist.Node{Name: "old"}) // DMax 0: a release before version 2
	b := mlDelegate{c}.NodeMeta(memberlist.MetaMaxSize)
	got, err := s22DecodeMetaV1(b)
	if err != nil || got.Region != "eu" || got.Incarnation != 7 || got.Epoch != 3 {
		t.Errorf("a node of the previous release reads an upgraded node's metadata as %+v, %v", got, err)
	}
	c.mlView.remove("old") // the last one upgraded
	m, err := decodeMeta(mlDelegate{c}.NodeMeta(memberlist.MetaMaxSize))
	if err != nil || m.Stamp == 0 {
		t.Errorf("with every member reading version 2: %+v, %v; want a stamp", m, err)
	}
}

func s22DecodeMetaV1(b []byte) (nodeMeta, error) {
	const (
		metaMagic   = "EM"
		metaVersion = 1
		metaFixed   = 2 + 1 + 1 + 8 + 8
	)
	var m nodeMeta
	switch {
	case len(b) < metaFixed:
		return m, fmt.Errorf("metadata of %d bytes, want at least %d", len(b), metaFixed)
	case string(b[:2]) != metaMagic:
		return m, errors.New("metadata is not an edge node's")
	case b[2] != metaVersion:
		return m, fmt.Errorf("metadata version %d, want %d", b[2], metaVersion)
	}
	n := int(b[3])
	if n > wire.MaxRegionLen || len(b) != metaFixed+n {
		return m, fmt.Errorf("metadata of %d bytes with a region of %d", len(b), n)
	}
	m.Region = string(b[4 : 4+n])
	if m.Region != "" && !ValidRegion(m.Region) {
		return m, fmt.Errorf("region %q is not a region label", m.Region)
	}
	m.Incarnation = binary.BigEndian.Uint64(b[4+n:])
	m.Epoch = binary.BigEndian.Uint64(b[12+n:])
	return m, nil
}
