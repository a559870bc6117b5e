//go:build linux

// Command netdelay delays every packet a network namespace sends by a fixed
// time, for bench/netns.sh on kernels without netem (sch_netem), the
// project's machine's among them. It is the user-space end of a netfilter
// queue: an nftables rule sends each packet leaving the namespace's eth0
// to queue --queue, the kernel keeps the packet and tells this process
// only its id (NFQNL_COPY_META: no payload is copied), and this process
// accepts the packets in the order they came once --delay has passed
// (one batch verdict accepts every packet up to an id). Large segments
// stay whole (NFQA_CFG_F_GSO), so a bulk transfer costs one verdict per
// segment, not per 1500-byte frame.
//
//	ip netns exec NS nft add table inet netdelay
//	ip netns exec NS nft add chain inet netdelay out '{ type filter hook output priority 0; }'
//	ip netns exec NS nft add rule inet netdelay out oifname eth0 queue num 0
//	ip netns exec NS netdelay --queue 0 --delay 5ms
//
// Without a process on the queue the kernel drops what the rule queues,
// so the namespace is cut off until netdelay runs: a delay never silently
// disappears. It speaks netlink itself (golang.org/x/sys/unix): no Go
// netfilter-queue library is served by the module proxy here.
package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Netfilter queue netlink constants (linux/netfilter/nfnetlink_queue.h).
const (
	nfnlSubsysQueue    = 3
	nfqnlMsgPacket     = 0
	nfqnlMsgConfig     = 2
	nfqnlMsgVerdictBat = 3

	nfqaPacketHdr  = 1
	nfqaVerdictHdr = 2

	nfqaCfgCmd      = 1
	nfqaCfgParams   = 2
	nfqaCfgQueueMax = 3
	nfqaCfgMask     = 4
	nfqaCfgFlags    = 5

	nfqnlCfgCmdBind = 1
	nfqnlCopyMeta   = 1
	nfqaCfgFGSO     = 1 << 2
	nfAccept        = 1
)

type pending struct {
	id  uint32
	due time.Time
}

func main() {
	queue := flag.Uint("queue", 0, "netfilter queue number the nftables rule sends packets to")
	delay := flag.Duration("delay", 0, "how long each packet is held before it is let through")
	flag.Parse()
	if *queue > 65535 || *delay < 0 {
		fmt.Fprintln(os.Stderr, "netdelay: --queue is 0-65535 and --delay not negative")
		os.Exit(2)
	}
	if err := run(uint16(*queue), *delay); err != nil {
		fmt.Fprintln(os.Stderr, "netdelay:", err)
		os.Exit(1)
	}
}

func run(queue uint16, delay time.Duration) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return fmt.Errorf("netlink socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("netlink bind: %w", err)
	}
	// Room for bursts: an overflow loses only notifications, and the next
	// batch verdict accepts the packets they were about.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20)
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_NO_ENOBUFS, 1)

	seq := uint32(1)
	config := func(attrs ...[]byte) error {
		seq++
		return request(fd, seq, nfqnlMsgConfig, queue, attrs...)
	}
	params := make([]byte, 5) // copy_range (be32), copy_mode
	params[4] = nfqnlCopyMeta
	if err := config(attr(nfqaCfgCmd, []byte{nfqnlCfgCmdBind, 0, 0, 0})); err != nil {
		return fmt.Errorf("binding queue %d: %w", queue, err)
	}
	if err := config(attr(nfqaCfgParams, params)); err != nil {
		return fmt.Errorf("queue %d copy mode: %w", queue, err)
	}
	if err := config(attr(nfqaCfgQueueMax, be32(1<<20))); err != nil {
		return fmt.Errorf("queue %d length: %w", queue, err)
	}
	if err := config(attr(nfqaCfgMask, be32(nfqaCfgFGSO)), attr(nfqaCfgFlags, be32(nfqaCfgFGSO))); err != nil {
		return fmt.Errorf("queue %d flags: %w", queue, err)
	}

	held := make(chan pending, 1<<20)
	errc := make(chan error, 2)
	go func() { errc <- release(fd, queue, held) }()
	go func() { errc <- receive(fd, delay, held) }()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sig:
		return nil
	case err := <-errc:
		return err
	}
}

// receive reads the kernel's packet notifications and holds each id.
func receive(fd int, delay time.Duration, held chan<- pending) error {
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENOBUFS) {
				continue
			}
			return fmt.Errorf("netlink receive: %w", err)
		}
		now := time.Now()
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return fmt.Errorf("netlink message: %w", err)
		}
		for _, m := range msgs {
			switch {
			case m.Header.Type == unix.NLMSG_ERROR:
				if code := int32(binary.LittleEndian.Uint32(m.Data)); code != 0 {
					return fmt.Errorf("the kernel refused a verdict: %w", syscall.Errno(-code))
				}
			case m.Header.Type == nfnlSubsysQueue<<8|nfqnlMsgPacket && len(m.Data) >= 4:
				for a := m.Data[4:]; len(a) >= 4; {
					l, t := int(binary.LittleEndian.Uint16(a)), binary.LittleEndian.Uint16(a[2:])&0x3fff
					if l < 4 || l > len(a) {
						break
					}
					if t == nfqaPacketHdr && l >= 8 {
						held <- pending{id: binary.BigEndian.Uint32(a[4:8]), due: now.Add(delay)}
					}
					a = a[min(len(a), (l+3)&^3):]
				}
			}
		}
	}
}

// release accepts held packets as they come due, every packet up to the
// last id due in one batch verdict (ids increase in the order packets are
// queued, and every packet is held equally long).
func release(fd int, queue uint16, held <-chan pending) error {
	// Go's timers wake about a millisecond late here (time.Sleep(250µs)
	// took 1.1 ms at the median): this goroutine keeps a thread of its
	// own and sleeps in nanosleep(2) with the least timer slack.
	runtime.LockOSThread()
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	var seq uint32 = 1 << 30
	var next *pending
	for {
		p := next
		if p == nil {
			q, ok := <-held
			if !ok {
				return nil
			}
			p = &q
		}
		next = nil
		sleepUntil(p.due)
		last := p.id
	due:
		for {
			select {
			case q := <-held:
				if time.Until(q.due) > 0 {
					next = &q
					break due
				}
				last = q.id
			default:
				break due
			}
		}
		if err := verdict(fd, &seq, queue, last); err != nil {
			return err
		}
	}
}

// sleepUntil blocks the thread until t.
func sleepUntil(t time.Time) {
	for d := time.Until(t); d > 0; d = time.Until(t) {
		ts := unix.NsecToTimespec(d.Nanoseconds())
		_ = unix.Nanosleep(&ts, nil)
	}
}

func verdict(fd int, seq *uint32, queue uint16, upTo uint32) error {
	*seq++
	hdr := make([]byte, 8)
	binary.BigEndian.PutUint32(hdr, nfAccept)
	binary.BigEndian.PutUint32(hdr[4:], upTo)
	return send(fd, *seq, nfqnlMsgVerdictBat, queue, 0, attr(nfqaVerdictHdr, hdr))
}

// request sends a config message and waits for its acknowledgement.
func request(fd int, seq uint32, msg uint8, queue uint16, attrs ...[]byte) error {
	if err := send(fd, seq, msg, queue, unix.NLM_F_ACK, attrs...); err != nil {
		return err
	}
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.Header.Type == unix.NLMSG_ERROR && m.Header.Seq == seq {
				if code := int32(binary.LittleEndian.Uint32(m.Data)); code != 0 {
					return syscall.Errno(-code)
				}
				return nil
			}
		}
	}
}

func send(fd int, seq uint32, msg uint8, queue uint16, flags uint16, attrs ...[]byte) error {
	body := []byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, byte(queue >> 8), byte(queue)}
	for _, a := range attrs {
		body = append(body, a...)
	}
	b := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+len(body))
	binary.LittleEndian.PutUint32(b, uint32(unix.NLMSG_HDRLEN+len(body)))
	binary.LittleEndian.PutUint16(b[4:], nfnlSubsysQueue<<8|uint16(msg))
	binary.LittleEndian.PutUint16(b[6:], unix.NLM_F_REQUEST|flags)
	binary.LittleEndian.PutUint32(b[8:], seq)
	b = append(b, body...)
	return unix.Sendto(fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
}

// attr is one netlink attribute, padded to 4 bytes.
func attr(typ uint16, payload []byte) []byte {
	b := make([]byte, 4, (4+len(payload)+3)&^3)
	binary.LittleEndian.PutUint16(b, uint16(4+len(payload)))
	binary.LittleEndian.PutUint16(b[2:], typ)
	b = append(b, payload...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
