package harness

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// linkProxy forwards TCP connections from its own 127.0.0.1 listener to one
// target address: one CometBFT peer link in one direction (node i dialling
// node j). Cut closes every connection it carries and makes it close each new
// one at once, as a network split would look to both ends; Heal lets new
// connections through again (CometBFT redials its persistent peers).
// DropUp and DropDown lose the bytes of one direction silently while the
// connections stay open: one-way loss.
type linkProxy struct {
	ln     net.Listener
	target string
	// dropUp discards what the dialling side sends, dropDown what the
	// target sends back.
	dropUp, dropDown atomic.Bool

	mu struct {
		sync.Mutex
		cut    bool
		closed bool
		conns  map[net.Conn]struct{}
	}
	wg sync.WaitGroup
}

// NewLinkProxy listens on a free 127.0.0.1 port and forwards to target.
func NewLinkProxy(target string) (*linkProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &linkProxy{ln: ln, target: target}
	p.mu.conns = make(map[net.Conn]struct{})
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the address peers dial instead of the target.
func (p *linkProxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every forwarded connection and refuses new ones until Heal.
func (p *linkProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.cut = true
	for c := range p.mu.conns {
		c.Close()
	}
}

// Heal lets new connections through again and stops any one-way loss.
func (p *linkProxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.cut = false
	p.dropUp.Store(false)
	p.dropDown.Store(false)
}

// Close stops the listener, closes every connection and waits for the
// proxy's goroutines.
func (p *linkProxy) Close() {
	p.mu.Lock()
	p.mu.closed = true
	for c := range p.mu.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

func (p *linkProxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.forward(c)
	}
}

// track registers c unless the link is cut or the proxy closed.
func (p *linkProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.cut || p.mu.closed {
		return false
	}
	p.mu.conns[c] = struct{}{}
	return true
}

func (p *linkProxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.mu.conns, c)
}

// forward pipes client to the target until either side ends or the link is
// cut; then it closes both.
func (p *linkProxy) forward(client net.Conn) {
	defer p.wg.Done()
	if !p.track(client) {
		client.Close()
		return
	}
	defer p.untrack(client)
	server, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		client.Close()
		return
	}
	if !p.track(server) {
		client.Close()
		server.Close()
		return
	}
	defer p.untrack(server)
	var once sync.Once
	closeBoth := func() { once.Do(func() { client.Close(); server.Close() }) }
	done := make(chan struct{}, 2)
	go func() { pipe(server, client, &p.dropUp); closeBoth(); done <- struct{}{} }()
	go func() { pipe(client, server, &p.dropDown); closeBoth(); done <- struct{}{} }()
	<-done
	<-done
}

// pipe copies src to dst until either fails, discarding what it reads
// while drop is set.
func pipe(dst io.Writer, src io.Reader, drop *atomic.Bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !drop.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Partition splits the network into the groups given: every link between
// nodes of different groups is cut (both directions), every link inside a
// group is healed.
func (c *Cluster) Partition(groups ...[]int) {
	c.T.Helper()
	if len(c.Proxies) == 0 {
		c.T.Fatal("partition needs a cluster made with proxies")
	}
	group := map[int]int{}
	for g, members := range groups {
		for _, i := range members {
			group[i] = g
		}
	}
	for link, p := range c.Proxies {
		if group[link[0]] == group[link[1]] {
			p.Heal()
		} else {
			p.Cut()
		}
	}
	c.T.Logf("%s network split %v", Clock(), groups)
}

// DropFrom loses everything node i sends its peers, silently, while it
// still hears them: every connection stays open (one-way loss). Heal ends
// it.
func (c *Cluster) DropFrom(i int) {
	c.T.Helper()
	if len(c.Proxies) == 0 {
		c.T.Fatal("one-way loss needs a cluster made with proxies")
	}
	for link, p := range c.Proxies {
		switch i {
		case link[0]: // i dialled: what it sends goes up
			p.dropUp.Store(true)
		case link[1]: // i was dialled: what it sends goes down
			p.dropDown.Store(true)
		}
	}
	c.T.Logf("%s node%d's messages to its peers are lost (one way)", Clock(), i)
}

// Heal restores every link.
func (c *Cluster) Heal() {
	for _, p := range c.Proxies {
		p.Heal()
	}
	c.T.Logf("%s network healed", Clock())
}
