// Calls whose number is known by construction, made across goroutine switches: 8 workers
// each call step 25 times; step calls (*counter).add, which yields (runtime.Gosched) and
// then sends on an unbuffered channel that main drains, so every call is interrupted by
// switches to other goroutines. Calls: main.worker 8, main.step 200, main.(*counter).add
// 200, main.(*counter).bump 200. Prints "sum 23400".
//
// With the argument `panic`, panics in main.(*counter).boom: Go's stack trace names the
// functions and files as wprof should. With `burn`, runs only main.burn, whose second loop
// does three times the work of its first: time per line, from the samples.
package main

import (
	"fmt"
	"os"
	"runtime"
	"sync"
)

type counter struct{ n int }

//go:noinline
func (c *counter) bump(k int) {
	c.n += k
}

//go:noinline
func (c *counter) add(k int) int {
	runtime.Gosched()
	c.bump(k)
	return k
}

//go:noinline
func step(ch chan<- int, c *counter, k int) {
	ch <- c.add(k)
}

//go:noinline
func worker(ch chan<- int, wg *sync.WaitGroup) {
	defer wg.Done()
	c := &counter{}
	for i := 0; i < 25; i++ {
		step(ch, c, i+1)
	}
}

//go:noinline
func (c *counter) boom() {
	panic(fmt.Sprintf("boom at %d", c.n))
}

//go:noinline
func mix(h uint32) uint32 {
	return h ^ h>>7
}

//go:noinline
func burn(n int) uint32 {
	h := uint32(1)
	for i := 0; i < n; i++ {
		h = h*31 + uint32(i)>>3 // first loop
	}
	h = mix(h)
	for i := 0; i < 3*n; i++ {
		h = h*31 + uint32(i)>>3 // second loop
	}
	return h
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "panic" {
		(&counter{n: 7}).boom()
	}
	if len(os.Args) > 1 && os.Args[1] == "burn" {
		fmt.Println("burn", burn(40_000_000))
		return
	}
	ch := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go worker(ch, &wg)
	}
	go func() {
		wg.Wait()
		close(ch)
	}()
	sum := 0
	for v := range ch {
		sum += v * 9
	}
	fmt.Println("sum", sum)
}
