package topics

import (
	"errors"

	"github.com/stele-io/stele/internal/record"
)

// Walking a partition's stored batches in the apply: the views module
// copies a source's batches once they are stable, the keys module reads a
// table's.

// EachBatch calls fn with each stored batch of p from the one holding
// offset from (or the first after it) up to to, in order, read 1 MiB at a
// time: at apply, the block's appends included. It stops at fn's first
// error, and without one when fn returns ErrStopBatches.
func (p *Partition) EachBatch(from, to int64, fn func(h record.Header, b []byte) error) error {
	for off := max(from, p.Start); off < to; {
		data, err := p.Log.Read(off, 1<<20, to)
		if err != nil {
			return err
		}
		if len(data) == 0 {
			return nil
		}
		batches, err := record.Split(data)
		if err != nil {
			return err
		}
		for _, b := range batches {
			h, err := record.ParseHeader(b)
			if err != nil {
				return err
			}
			off = h.LastOffset() + 1
			if err := fn(h, b); err == ErrStopBatches {
				return nil
			} else if err != nil {
				return err
			}
		}
	}
	return nil
}

// ErrStopBatches, returned by EachBatch's fn, ends the walk without an
// error.
var ErrStopBatches = errors.New("stop")
