package kafka

import (
	"context"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/broker"
)

// TestSubmitErrorCodes: a command that was never ordered gets the code a
// client acts on; a batch the validators did not certify is retriable
// (docs/data-plane.md).
func TestSubmitErrorCodes(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int16
	}{
		{fmt.Errorf("%w: 2 of 4 validators signed", broker.ErrUncertified), kerr.RequestTimedOut.Code},
		{context.DeadlineExceeded, kerr.RequestTimedOut.Code},
		{fmt.Errorf("%w: 5000 transactions", broker.ErrMempoolFull), kerr.RequestTimedOut.Code},
		{broker.ErrTooLarge, kerr.MessageTooLarge.Code},
		{broker.ErrClosed, kerr.NotLeaderForPartition.Code},
	} {
		if got := submitErrorCode(c.err); got != c.want {
			t.Errorf("%v: code %d, want %d", c.err, got, c.want)
		}
	}
}
