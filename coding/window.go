package coding

import "encoding/binary"

// A decoder's memory is its window, which the stream declares in its
// first bytes: charging what the stream declares (not the format's
// largest) lets small bodies decode under a small budget.

// decoderTables is what a brotli or zstd decoder holds besides its window
// (measured: 0.1–0.45 MiB).
const decoderTables = 512 << 10

// DecoderBytesFor is the memory a decoder of e holds for a body that
// starts with head (at least its first 18 bytes, when it has them; for
// zstd, the whole body if it may hold several frames): the declared
// window plus tables, never more than DecoderBytes(e). A head it cannot
// read is charged DecoderBytes(e).
func DecoderBytesFor(e Encoding, head []byte) int64 {
	var w int64
	var ok bool
	switch e {
	case Br:
		w, ok = brotliWindow(head)
	case Zstd:
		w, ok = zstdWindow(head)
	default:
		return DecoderBytes(e)
	}
	if !ok {
		return DecoderBytes(e)
	}
	return min(w+decoderTables, DecoderBytes(e))
}

// StreamDecoderBytes is the memory to charge for decoding a stream of
// which only head has been read (whole: head is the whole body). A brotli
// stream declares its window once, at its start; a zstd stream may hold
// further frames, each with its own window, so unless head is the whole
// body it is charged the most a zstd decoder takes (a review: a 2 KB body
// of a 1 KiB-window frame and an 8 MiB one held 8 MiB against a charge of
// 0.5 MiB).
func StreamDecoderBytes(e Encoding, head []byte, whole bool) int64 {
	if e == Zstd && !whole {
		return DecoderBytes(Zstd)
	}
	return DecoderBytesFor(e, head)
}

// brotliWindow reads WBITS from a brotli stream header (RFC 7932 §9.1).
func brotliWindow(b []byte) (int64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	bits := uint32(b[0])
	if len(b) > 1 {
		bits |= uint32(b[1]) << 8
	}
	wbits := 0
	switch {
	case bits&1 == 0:
		wbits = 16
	case (bits>>1)&7 != 0:
		wbits = 17 + int((bits>>1)&7)
	case (bits>>4)&7 == 1:
		return 0, false // the large-window extension: not HTTP's br
	case (bits>>4)&7 != 0:
		wbits = 8 + int((bits>>4)&7)
	default:
		wbits = 17
	}
	return int64(1)<<wbits - 16, true
}

// zstdWindow walks the zstd frames of b (RFC 8878 §3.1) and returns the
// largest window any of them declares. Skippable frames are skipped. A
// body cut short after a complete first frame header is read as far as it
// goes (a stream's head), so a later frame in bytes not seen is not
// charged: decoders refuse windows above maxZstdWindow anyway.
func zstdWindow(b []byte) (int64, bool) {
	var largest int64
	frames := 0
	for len(b) >= 4 {
		magic := binary.LittleEndian.Uint32(b)
		if magic&0xFFFFFFF0 == 0x184D2A50 { // skippable frame
			if len(b) < 8 {
				break
			}
			n := int(binary.LittleEndian.Uint32(b[4:]))
			if n < 0 || 8+n > len(b) {
				break
			}
			b = b[8+n:]
			continue
		}
		if magic != 0xFD2FB528 {
			return 0, false
		}
		window, p, checksum, ok := zstdFrameHeader(b)
		if !ok {
			return 0, false
		}
		largest = max(largest, window)
		frames++
		p, whole := zstdSkipBlocks(b, p)
		if !whole {
			return largest, true
		}
		if checksum {
			p += 4
		}
		if p > len(b) {
			return largest, true
		}
		b = b[p:]
	}
	return largest, frames > 0
}

// zstdFrameHeader reads the header of the frame b starts with (its magic
// number checked): the window it declares, where its blocks start, and
// whether a checksum follows them. ok is false for a header cut short.
func zstdFrameHeader(b []byte) (window int64, p int, checksum, ok bool) {
	if len(b) < 5 {
		return 0, 0, false, false
	}
	fhd := b[4]
	single := fhd&0x20 != 0
	checksum = fhd&0x04 != 0
	didSize := [4]int{0, 1, 2, 4}[fhd&3]
	fcsSize := [4]int{0, 2, 4, 8}[fhd>>6]
	if single && fhd>>6 == 0 {
		fcsSize = 1
	}
	p = 5
	if !single {
		if len(b) < p+1 {
			return 0, 0, false, false
		}
		wd := b[p]
		p++
		base := int64(1) << (10 + wd>>3)
		window = base + base/8*int64(wd&7)
	}
	p += didSize
	if len(b) < p+fcsSize {
		return 0, 0, false, false
	}
	if single {
		// A single-segment frame's window is its content size.
		var fcs uint64
		switch fcsSize {
		case 1:
			fcs = uint64(b[p])
		case 2:
			fcs = uint64(binary.LittleEndian.Uint16(b[p:])) + 256
		case 4:
			fcs = uint64(binary.LittleEndian.Uint32(b[p:]))
		case 8:
			fcs = binary.LittleEndian.Uint64(b[p:])
		}
		window = int64(min(fcs, 1<<40))
	}
	return window, p + fcsSize, checksum, true
}

// zstdSkipBlocks skips the blocks of a frame from b[p:] to reach what
// follows them; whole is false when b ends first.
func zstdSkipBlocks(b []byte, p int) (int, bool) {
	for {
		if len(b) < p+3 {
			return p, false
		}
		h := uint32(b[p]) | uint32(b[p+1])<<8 | uint32(b[p+2])<<16
		p += 3
		size := int(h >> 3)
		if (h>>1)&3 == 1 { // RLE: one byte
			size = 1
		}
		p += size
		if h&1 != 0 { // the last block
			return p, true
		}
	}
}
