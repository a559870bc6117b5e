package fsm

import "github.com/stele-io/stele/internal/fsm/views"

// The views module's names the broker and the CLI use, under the package
// they import (core_api.go says why).

// ViewSourceHeader names, on a view's record, the source record it copies.
const ViewSourceHeader = views.SourceHeader

// ParseViewSource reads a ViewSourceHeader value: topic/partition/offset.
func ParseViewSource(v []byte) (topic string, partition int32, offset int64, err error) {
	return views.ParseSource(v)
}
