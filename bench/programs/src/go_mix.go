// The Go benchmark: 8 goroutines, each encoding and decoding JSON records, matching a
// regexp over the encoded bytes, gzip-compressing them and hashing the result with
// SHA-256. On wasip1 the goroutines share one thread, so the scheduler switches between
// them. Prints a checksum of the eight hashes.
package main

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"regexp"
	"sync"
)

type Record struct {
	ID    int               `json:"id"`
	Name  string            `json:"name"`
	Tags  []string          `json:"tags"`
	Attrs map[string]string `json:"attrs"`
	Score float64           `json:"score"`
}

var word = regexp.MustCompile(`[a-z]+[0-9]*`)

func work(seed int) [32]byte {
	h := sha256.New()
	for i := 0; i < 120; i++ {
		recs := make([]Record, 20)
		for j := range recs {
			recs[j] = Record{ID: seed*1000 + i*20 + j, Name: fmt.Sprintf("item%d-%d", i, j),
				Tags:  []string{"alpha", "beta", fmt.Sprint(j)},
				Attrs: map[string]string{"k": fmt.Sprint(i), "w": "value"}, Score: float64(i*j) / 7}
		}
		data, _ := json.Marshal(recs)
		var back []Record
		if err := json.Unmarshal(data, &back); err != nil {
			panic(err)
		}
		n := len(word.FindAllIndex(data, -1))
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(data)
		zw.Close()
		h.Write(buf.Bytes())
		fmt.Fprint(h, n, len(back))
	}
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

func main() {
	var wg sync.WaitGroup
	results := make([][32]byte, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) { defer wg.Done(); results[g] = work(g) }(g)
	}
	wg.Wait()
	total := sha256.New()
	for _, r := range results {
		total.Write(r[:])
	}
	fmt.Printf("checksum %x\n", total.Sum(nil)[:8])
}
