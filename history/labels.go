package history

import "strings"

// MaxLabelKeyLen bounds a label key ([TaskScheduledData.Labels]).
const MaxLabelKeyLen = 64

// IsLabelKey reports whether key is a valid label key: 1 to MaxLabelKeyLen
// letters, digits, '_', '.', '-' or '/'. Start refuses other keys, and
// metrics name their label dimensions after such keys.
func IsLabelKey(key string) bool {
	return key != "" && len(key) <= MaxLabelKeyLen && strings.IndexFunc(key, notLabelKeyRune) < 0
}

func notLabelKeyRune(r rune) bool {
	return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_.-/", r))
}
