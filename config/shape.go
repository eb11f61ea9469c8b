package config

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// checkShape finds what a file says that viper's merge hides: a key
// written twice in different case (viper folds keys to lower case and keeps
// one of the two without a word, so `max_bytes: 2MiB` beside `Max_Bytes:
// 3GiB` ran with 3 GiB), a section given a value or nothing (viper then
// called the section an unknown key), and a key given no value (viper
// then took its default, whatever the line seemed to say). An operator's
// walk-through found all three passing `edge config check`.
//
// The file is read as the YAML decoder reads it: aliases stand for what
// they name, and the keys a merge key (<<) brings in count as written
// there, after the mapping's own (which override the merged ones of the
// same spelling, as YAML says). Inside the values of list keys (sites,
// rules, certificates) only case duplicates are looked for: their keys are
// checked by their own parsers.
func checkShape(data []byte) []error {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
		return nil // the merge read it, so this does not fail; if it did, nothing to add
	}
	leaves := map[string]Key{}
	sections := map[string]bool{}
	for _, k := range Keys() {
		leaves[k.Name] = k
		for i, c := range k.Name {
			if c == '.' {
				sections[k.Name[:i]] = true
			}
		}
	}
	var errs []error
	fail := func(key, reason string) {
		errs = append(errs, &Error{Key: key, Reason: reason, Source: "the config file"})
	}
	// inList checks any value under a list key for case duplicates only.
	var inList func(n *yaml.Node, key string, depth int)
	inList = func(n *yaml.Node, key string, depth int) {
		n = resolve(n)
		if depth > maxShapeDepth {
			return
		}
		switch n.Kind {
		case yaml.SequenceNode:
			for i, e := range n.Content {
				inList(e, fmt.Sprintf("%s[%d]", key, i), depth+1)
			}
		case yaml.MappingNode:
			for _, kv := range mappingPairs(n, key, fail) {
				inList(kv.val, key+"."+strings.ToLower(kv.name), depth+1)
			}
		}
	}
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		for _, kv := range mappingPairs(resolve(n), strings.TrimSuffix(prefix, "."), fail) {
			key, val := prefix+strings.ToLower(kv.name), resolve(kv.val)
			null := val.Kind == yaml.ScalarNode && val.ShortTag() == "!!null"
			switch {
			case sections[key] && val.Kind == yaml.MappingNode:
				walk(val, key+".")
			case sections[key] && null:
				fail(key, "is empty: give its keys indented under it, or leave it out")
			case sections[key]:
				fail(key, "is a section, not a value: give its keys indented under it (see docs/operations.md)")
			case null:
				if k, ok := leaves[key]; ok {
					def := k.Default
					if def == "" {
						def = "empty"
					}
					fail(key, fmt.Sprintf("has no value: give one, or leave the key out for its default (%s)", def))
				}
			default:
				inList(val, key, 0)
			}
		}
	}
	walk(doc.Content[0], "")
	return errs
}

// maxShapeDepth bounds the walk inside list values: the YAML decoder
// already refuses alias expansions that blow up, and no key of a site or
// rule nests deeper than a few levels.
const maxShapeDepth = 16

// resolve follows aliases to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && n.Alias != nil && i < maxShapeDepth; i++ {
		n = n.Alias
	}
	return n
}

type yamlPair struct {
	name string
	val  *yaml.Node
}

// mappingPairs is a mapping's keys as the decoder takes them: its own,
// then those its merge keys (<<) bring in that it does not write itself. A
// key spelt twice in different case, by the mapping or through a merge,
// is reported (at key, the mapping's dotted name) and taken once.
func mappingPairs(n *yaml.Node, key string, fail func(key, reason string)) []yamlPair {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	var out []yamlPair
	written := map[string]string{} // folded name → as first written
	add := func(name string, val *yaml.Node, merged bool) {
		folded := strings.ToLower(name)
		first, ok := written[folded]
		switch {
		case !ok:
			written[folded] = name
			out = append(out, yamlPair{name, val})
		case merged && first == name:
			// Overridden by the mapping's own key, or an earlier merge's.
		default:
			full := folded
			if key != "" {
				full = key + "." + folded
			}
			fail(full, fmt.Sprintf("is written twice, as %q and %q (keys are not case-sensitive): keep one", first, name))
		}
	}
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; k.Value == "<<" && k.ShortTag() == "!!merge" {
			merges = append(merges, n.Content[i+1])
			continue
		}
		add(n.Content[i].Value, n.Content[i+1], false)
	}
	for _, m := range merges {
		m = resolve(m)
		sources := []*yaml.Node{m}
		if m.Kind == yaml.SequenceNode {
			sources = m.Content
		}
		for _, src := range sources {
			if src = resolve(src); src.Kind == yaml.MappingNode {
				for _, kv := range mappingPairs(src, key, fail) {
					add(kv.name, kv.val, true)
				}
			}
		}
	}
	return out
}

// shapeCovers reports whether key is, or lies under, a key an error of
// checkShape names: the unknown-key check then says nothing more of it.
func shapeCovers(errs []error, key string) bool {
	for _, err := range errs {
		if e, ok := err.(*Error); ok && (key == e.Key || strings.HasPrefix(key, e.Key+".")) {
			return true
		}
	}
	return false
}
