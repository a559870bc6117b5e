package fsm

// A transaction is the unit the orderer carries: a header, a nonce that makes
// every transaction unique (the orderer's mempool drops exact duplicates), and
// a list of commands. Its layout, all integers big-endian:
//
//	magic   "STL"        3 bytes
//	version 1            1 byte
//	nonce                16 bytes, chosen by the submitting broker
//	count                uvarint, 1..maxCommands
//	count × { kind u8, length uvarint, body [length]byte }
//
// Each body must be consumed exactly by its kind's decoder.

const (
	txVersion   = 1
	maxCommands = 1 << 16
)

var txMagic = [3]byte{'S', 'T', 'L'}

// Nonce makes a transaction unique; it carries no meaning for the state.
type Nonce [16]byte

// Digest is the SHA-256 of a batch payload: a certified transaction's
// payload (cert.go, TxOutcome.Batch) and what the block digest hashes a
// transaction as.
type Digest = [32]byte

// Tx is a decoded transaction.
type Tx struct {
	Nonce    Nonce
	Commands []Command
}

// encodeTx encodes a transaction (EncodeTx).
func (g *Registry) encodeTx(tx Tx) []byte {
	size := 32
	for _, c := range tx.Commands {
		size += g.encodedSize(c)
	}
	w := &writer{b: make([]byte, 0, size)}
	w.raw(txMagic[:])
	w.u8(txVersion)
	w.raw(tx.Nonce[:])
	w.count(len(tx.Commands))
	body := &writer{}
	for _, c := range tx.Commands {
		body.b = body.b[:0]
		c.encode(body)
		w.u8(uint8(c.Kind()))
		w.bytes(body.b)
	}
	return w.b
}

// decodeTx decodes a transaction with g's commands (DecodeTx).
func (g *Registry) decodeTx(b []byte) (Tx, error) {
	r := &reader{b: b}
	var tx Tx
	magic := r.take(3)
	if r.e == nil && string(magic) != string(txMagic[:]) {
		r.fail("bad magic %q", magic)
	}
	if v := r.u8(); r.e == nil && v != txVersion {
		r.fail("unsupported transaction version %d", v)
	}
	copy(tx.Nonce[:], r.take(len(tx.Nonce)))
	n := r.count(2)
	if r.e == nil && (n == 0 || n > maxCommands) {
		r.fail("%d commands", n)
	}
	for i := 0; i < n && r.e == nil; i++ {
		k := Kind(r.u8())
		body := &reader{b: r.bytes()}
		if r.e != nil {
			break
		}
		c := g.decodeCommand(k, body)
		if err := body.done(); err != nil {
			r.e = err
			break
		}
		tx.Commands = append(tx.Commands, c)
	}
	if err := r.done(); err != nil {
		return Tx{}, err
	}
	return tx, nil
}
