package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
)

// deletedSuffix marks files Kafka renames before deleting them; OpenLog
// deletes any it finds.
const deletedSuffix = ".deleted"

// tidyDir brings a partition directory to a state of plain segments: it
// finishes compactions that reached their commit point (a .log.swap file:
// the .index.swap and .timeindex.swap still present are renamed into place,
// then the .log.swap), deletes what remains of others (.cleaned and .swap
// files) along with .deleted files and index files without a .log, and
// returns the base offsets of the segments in order. changed is true if it
// renamed or removed anything.
func tidyDir(dir string) (bases []int64, changed bool, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, false, fmt.Errorf("stele/storage: %w", err)
	}
	byBase := map[int64]map[string]bool{} // base offset -> suffixes present
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		base, suffix, ok := parseSegmentName(e.Name())
		if !ok {
			continue
		}
		if byBase[base] == nil {
			byBase[base] = map[string]bool{}
		}
		byBase[base][suffix] = true
	}
	all := make([]int64, 0, len(byBase))
	for base := range byBase {
		all = append(all, base)
	}
	slices.Sort(all)
	for _, base := range all {
		present := byBase[base]
		path := segmentPath(dir, base)
		if present[logSuffix+swapSuffix] {
			if err := finishSwap(dir, path, present); err != nil {
				return nil, true, err
			}
			changed = true
		}
		for suffix := range present {
			orphan := (suffix == indexSuffix || suffix == timeIndexSuffix) && !present[logSuffix]
			temp := strings.HasSuffix(suffix, cleanedSuffix) || strings.HasSuffix(suffix, swapSuffix) || strings.HasSuffix(suffix, deletedSuffix)
			if !present[suffix] || !orphan && !temp {
				continue
			}
			if err := os.Remove(path + suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, changed, fmt.Errorf("stele/storage: %w", err)
			}
			changed = true
		}
		if present[logSuffix] {
			bases = append(bases, base)
		}
	}
	return bases, changed, nil
}

// finishSwap completes a compaction swap that passed its commit point: the
// index .swap files left are renamed into place and made durable before the
// .log.swap is, the order Log.swapIn uses.
func finishSwap(dir, path string, present map[string]bool) error {
	for _, suffix := range []string{indexSuffix, timeIndexSuffix, "", logSuffix} {
		if suffix == "" {
			if err := SyncDir(dir); err != nil {
				return err
			}
			continue
		}
		if !present[suffix+swapSuffix] {
			continue
		}
		if err := os.Rename(path+suffix+swapSuffix, path+suffix); err != nil {
			return fmt.Errorf("stele/storage: finishing an interrupted compaction: %w", err)
		}
		present[suffix], present[suffix+swapSuffix] = true, false
	}
	return nil
}

// knownSuffix reports whether tidyDir looks at files ending in suffix.
func knownSuffix(suffix string) bool {
	for _, s := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
		if rest, ok := strings.CutPrefix(suffix, s); ok {
			return rest == "" || rest == cleanedSuffix || rest == swapSuffix || rest == deletedSuffix
		}
	}
	return false
}

// parseSegmentName splits "00000000000000000042.log.swap" into 42 and
// ".log.swap". ok is false for names that are not a 20-digit offset and a
// known suffix.
func parseSegmentName(name string) (base int64, suffix string, ok bool) {
	if len(name) <= 20 || !knownSuffix(name[20:]) {
		return 0, "", false
	}
	for _, c := range name[:20] {
		if c < '0' || c > '9' {
			return 0, "", false
		}
	}
	base, err := strconv.ParseInt(name[:20], 10, 64)
	if err != nil {
		return 0, "", false
	}
	return base, name[20:], true
}
