package kafka

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/broker"
	"github.com/stele-io/stele/internal/fsm"
)

// submitErrorCode maps an error from broker.Submit (a command whose fate is
// unknown or that was never ordered) to the Kafka error code a client should
// act on. Every one of them is retriable except a command too large to order.
func submitErrorCode(err error) int16 {
	switch {
	case errors.Is(err, broker.ErrTooLarge):
		return kerr.MessageTooLarge.Code
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return kerr.RequestTimedOut.Code
	case errors.Is(err, broker.ErrMempoolFull), errors.Is(err, broker.ErrUncertified):
		return kerr.RequestTimedOut.Code
	case errors.Is(err, broker.ErrClosed):
		return kerr.NotLeaderForPartition.Code
	}
	return kerr.UnknownServerError.Code
}

// submit orders cmds with a deadline of timeoutMs (Kafka's request timeout
// field; <= 0 means 30 s) and returns, per command, the Kafka error code and
// message plus the result.
func (c *conn) submit(timeoutMs int32, cmds ...fsm.Command) []outcome {
	d := time.Duration(timeoutMs) * time.Millisecond
	if d <= 0 {
		d = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(c.ctx, d)
	defer cancel()
	n := len(cmds)
	defer c.waitedSince(time.Now())
	res, errs := c.s.b.Submit(ctx, byzantineCommands(cmds)...)
	return c.outcomes(res, errs)[:n]
}

// outcome is one command's result as a Kafka error code and message.
type outcome struct {
	fsm.Result
	msg *string
}

func (c *conn) outcomes(res []fsm.Result, errs []error) []outcome {
	out := make([]outcome, len(errs))
	for i, err := range errs {
		if err != nil {
			m := err.Error()
			out[i] = outcome{Result: fsm.Result{Code: submitErrorCode(err)}, msg: &m}
			if out[i].Code == kerr.UnknownServerError.Code {
				// Not a refusal clients know to retry: worth an operator's
				// eye.
				c.s.opts.Logger.Warn("a command failed with UNKNOWN_SERVER_ERROR", "err", err)
			}
			continue
		}
		out[i].Result = res[i]
		if res[i].Message != "" {
			m := res[i].Message
			out[i].msg = &m
		}
	}
	return out
}
