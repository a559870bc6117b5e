package core

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

var TxMagic = [3]byte{'S', 'T', 'L'}

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

// EncodeTx encodes a transaction (EncodeTx).
func (g *Registry) EncodeTx(tx Tx) []byte {
	size := 32
	for _, c := range tx.Commands {
		size += g.encodedSize(c)
	}
	w := &Writer{B: make([]byte, 0, size)}
	w.Raw(TxMagic[:])
	w.U8(txVersion)
	w.Raw(tx.Nonce[:])
	w.Count(len(tx.Commands))
	body := &Writer{}
	for _, c := range tx.Commands {
		body.B = body.B[:0]
		c.Encode(body)
		w.U8(uint8(c.Kind()))
		w.Bytes(body.B)
	}
	return w.B
}

// DecodeTx decodes a transaction with g's commands (DecodeTx).
func (g *Registry) DecodeTx(b []byte) (Tx, error) {
	r := &Reader{B: b}
	var tx Tx
	magic := r.Take(3)
	if r.E == nil && string(magic) != string(TxMagic[:]) {
		r.Fail("bad magic %q", magic)
	}
	if v := r.U8(); r.E == nil && v != txVersion {
		r.Fail("unsupported transaction version %d", v)
	}
	copy(tx.Nonce[:], r.Take(len(tx.Nonce)))
	n := r.Count(2)
	if r.E == nil && (n == 0 || n > maxCommands) {
		r.Fail("%d commands", n)
	}
	for i := 0; i < n && r.E == nil; i++ {
		k := Kind(r.U8())
		body := &Reader{B: r.Bytes()}
		if r.E != nil {
			break
		}
		c := g.DecodeCommand(k, body)
		if err := body.Done(); err != nil {
			r.E = err
			break
		}
		tx.Commands = append(tx.Commands, c)
	}
	if err := r.Done(); err != nil {
		return Tx{}, err
	}
	return tx, nil
}
