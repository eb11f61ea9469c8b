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
// Only the file's mappings are walked: the values of list keys (sites,
// rules, certificates) are checked by their own parsers.
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
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		if n.Kind != yaml.MappingNode {
			return
		}
		written := map[string]string{} // folded name → as first written
		for i := 0; i+1 < len(n.Content); i += 2 {
			as, val := n.Content[i].Value, n.Content[i+1]
			name := strings.ToLower(as)
			key := prefix + name
			if first, ok := written[name]; ok {
				errs = append(errs, &Error{Key: key, Reason: fmt.Sprintf("is written twice, as %q and %q (keys are not case-sensitive): keep one", first, as), Source: "the config file"})
				continue
			}
			written[name] = as
			null := val.Kind == yaml.ScalarNode && val.ShortTag() == "!!null"
			switch {
			case sections[key] && val.Kind == yaml.MappingNode:
				walk(val, key+".")
			case sections[key] && null:
				errs = append(errs, &Error{Key: key, Reason: "is empty: give its keys indented under it, or leave it out", Source: "the config file"})
			case sections[key]:
				errs = append(errs, &Error{Key: key, Reason: "is a section, not a value: give its keys indented under it (see docs/operations.md)", Source: "the config file"})
			case null:
				if k, ok := leaves[key]; ok {
					def := k.Default
					if def == "" {
						def = "empty"
					}
					errs = append(errs, &Error{Key: key, Reason: fmt.Sprintf("has no value: give one, or leave the key out for its default (%s)", def), Source: "the config file"})
				}
			}
		}
	}
	walk(doc.Content[0], "")
	return errs
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
