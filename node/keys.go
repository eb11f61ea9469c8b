package node

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
)

// maxKeyRequestBytes bounds the body of POST /cluster/keys (a secret).
const maxKeyRequestBytes = 4096

// clusterKeys serves POST /cluster/keys?op=install|use|remove with the
// secret as the body: the membership encryption key derived from it is
// installed, made primary, or removed on this node (cluster/keyring.go;
// docs/cluster.md, "Rotating the membership key"). It answers the
// installed keys' fingerprints. GET lists them.
func (n *Node) clusterKeys(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if n.cluster == nil {
		w.WriteHeader(http.StatusConflict)
		_ = json.NewEncoder(w).Encode(map[string]string{"result": "refused", "error": "not clustered: no cluster.peers or cluster.dns"})
		return
	}
	if r.Method == http.MethodPost {
		secret, err := io.ReadAll(io.LimitReader(r.Body, maxKeyRequestBytes+1))
		if err == nil && len(secret) > maxKeyRequestBytes {
			err = errors.New("the secret is longer than 4096 bytes")
		}
		if err == nil {
			err = n.cluster.ChangeKey(r.URL.Query().Get("op"), secret)
		}
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]string{"result": "refused", "error": err.Error()})
			return
		}
		n.log.Info("membership key changed", "op", r.URL.Query().Get("op"))
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"result": "ok", "keys": n.cluster.Keys()})
}
