package engine

// recent is a map that forgets its oldest keys, so the engine's memory
// stays bounded however long it runs: it holds its idempotency records and
// the ends of transactions. It keeps two generations of at most max/2 keys
// each; when the current one fills, it becomes the previous one and the
// previous one is dropped whole — no per-key deletes, which would leave a
// hash table full of tombstones under constant churn. What is forgotten
// depends only on the sequence of puts, so a replay of the log forgets
// exactly what the live engine forgot.
type recent[V any] struct {
	cur, prev map[string]V
	half      int
	// keep, if set, lists at each turn the keys that must survive it (the
	// interim decisions of intents still parked).
	keep func(yield func(key string))
	// forget, if set, is told of each generation a turn drops.
	forget func(dropped map[string]V)
	// carried is how many keys the last turn carried into cur. A turn comes
	// after half new keys, not when cur holds half: with more kept keys
	// than half, every put would otherwise turn and copy them all again,
	// which made parking many waiters quadratic.
	carried int
}

func newRecent[V any](limit int, keep func(yield func(string))) *recent[V] {
	half := max(limit/2, 1)
	return &recent[V]{cur: make(map[string]V), prev: map[string]V{}, half: half, keep: keep}
}

func (r *recent[V]) get(k string) (V, bool) {
	if v, ok := r.cur[k]; ok {
		return v, true
	}
	v, ok := r.prev[k]
	return v, ok
}

// claim puts v under k unless k holds a value that may not be replaced
// (replace reports false for it); it says whether it put.
func (r *recent[V]) claim(k string, v V, replace func(old V) bool) bool {
	if old, ok := r.cur[k]; ok {
		if !replace(old) {
			return false
		}
		r.cur[k] = v
		return true
	}
	if old, ok := r.prev[k]; ok && !replace(old) {
		return false
	}
	r.put(k, v)
	return true
}

func (r *recent[V]) put(k string, v V) {
	if _, ok := r.cur[k]; ok {
		r.cur[k] = v
		return
	}
	delete(r.prev, k)
	if len(r.cur)-r.carried >= r.half {
		if r.forget != nil {
			r.forget(r.prev)
		}
		r.prev, r.cur = r.cur, make(map[string]V, r.half)
		if r.keep != nil {
			r.keep(func(k string) {
				if v, ok := r.prev[k]; ok {
					r.cur[k] = v
				}
			})
		}
		r.carried = len(r.cur)
	}
	r.cur[k] = v
}
