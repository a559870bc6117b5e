package schema

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Confluent's wire format: a record's key or value written by Confluent's
// serializers (and franz-go's sr.Serde) is a magic byte 0, the schema's id
// as 4 bytes big-endian, then the payload (for Protobuf, the message
// indexes first).

// WireHeaderSize is the magic byte and the id.
const WireHeaderSize = 5

// ErrWire is wrapped by the errors of bytes not in Confluent's wire format.
var ErrWire = errors.New("stele/schema: not in Confluent's wire format")

// ParseWire splits b into its schema id and payload.
func ParseWire(b []byte) (id int32, payload []byte, err error) {
	switch {
	case len(b) < WireHeaderSize:
		return 0, nil, fmt.Errorf("%w: %d bytes, fewer than the magic byte and a 4-byte schema id", ErrWire, len(b))
	case b[0] != 0:
		return 0, nil, fmt.Errorf("%w: magic byte %d, not 0", ErrWire, b[0])
	}
	id = int32(binary.BigEndian.Uint32(b[1:5]))
	if id <= 0 {
		return 0, nil, fmt.Errorf("%w: schema id %d", ErrWire, id)
	}
	return id, b[5:], nil
}

// AppendWire appends the wire format's header for schema id to b.
func AppendWire(b []byte, id int32) []byte {
	return binary.BigEndian.AppendUint32(append(b, 0), uint32(id))
}
