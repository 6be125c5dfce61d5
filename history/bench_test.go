package history_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/history/historytest"
)

// samplePayloads returns one generated payload of each event type.
func samplePayloads(b *testing.B) map[history.Type]history.Payload {
	b.Helper()
	out := map[history.Type]history.Payload{}
	for seed := uint64(0); len(out) < len(history.Types); seed++ {
		require.Less(b, seed, uint64(10_000), "the generator misses a type")
		for _, e := range historytest.FromSeed(seed, historytest.Opts{Complete: true}) {
			if _, ok := out[e.Type()]; !ok {
				out[e.Type()] = e.Data
			}
		}
	}
	return out
}

func BenchmarkEncode(b *testing.B) {
	payloads := samplePayloads(b)
	for _, typ := range history.Types {
		p := payloads[typ]
		b.Run(string(typ), func(b *testing.B) {
			data, err := history.Encode(p)
			require.NoError(b, err)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := history.Encode(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	payloads := samplePayloads(b)
	for _, typ := range history.Types {
		data, err := history.Encode(payloads[typ])
		require.NoError(b, err)
		b.Run(string(typ), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := history.Decode(typ, data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReplay folds histories of many attempts, each completing up to
// eight steps; DESIGN.md requires replay to stay linear in history length,
// so ns/event should not grow with the size.
func BenchmarkReplay(b *testing.B) {
	for _, n := range []int{10, 1000, 100_000} {
		events := historytest.Long(n, 1)
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := history.Replay(events); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/event")
		})
	}
}
