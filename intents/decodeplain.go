package intents

// intent reads an intent by hand, as strictUnmarshal would: each member
// name exactly as schemas/intent.json spells it and given once. What it
// does not take (see plainReader) goes to strictUnmarshal, which also words
// the errors.
func (r *plainReader) intent(data []byte, in *Intent) bool {
	r.reset(data)
	var seen uint32
	ok := r.object(func(name string) bool {
		var bit uint32
		ok := false
		switch name {
		case "id":
			bit, ok = 1<<0, r.str(&in.ID)
		case "agent":
			bit, ok = 1<<1, r.str(&in.Agent)
		case "kind":
			bit, ok = 1<<2, r.str((*string)(&in.Kind))
		case "txn":
			bit, ok = 1<<3, r.str(&in.Txn)
		case "fence":
			bit, ok = 1<<4, r.uint(&in.Fence)
		case "action":
			bit, ok = 1<<5, r.str(&in.Action)
		case "reads":
			bit, ok = 1<<6, r.reads(&in.Reads)
		case "writes":
			bit, ok = 1<<7, r.writes(&in.Writes)
		case "pre":
			bit, ok = 1<<8, r.strs(&in.Pre)
		case "post":
			bit, ok = 1<<9, r.strs(&in.Post)
		case "priority":
			bit, ok = 1<<10, r.int(&in.Priority)
		case "lease_ms":
			bit, ok = 1<<11, r.int(&in.LeaseMS)
		case "on_conflict":
			bit, ok = 1<<12, r.str((*string)(&in.OnConflict))
		case "wait_ms":
			bit, ok = 1<<13, r.int(&in.WaitMS)
		case "meta":
			bit, ok = 1<<14, r.raw((*[]byte)(&in.Meta))
		}
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
		return true
	})
	return ok && r.end()
}

func (r *plainReader) reads(dst *[]Read) bool {
	rs := []Read{}
	ok := r.array(func() bool {
		var rd Read
		var seen uint
		ok := r.object(func(name string) bool {
			var bit uint
			ok := false
			switch name {
			case "path":
				bit, ok = 1, r.str(&rd.Path)
			case "version":
				v := new(uint64)
				bit, ok = 2, r.uint(v)
				rd.Version = v
			}
			if !ok || seen&bit != 0 {
				return false
			}
			seen |= bit
			return true
		})
		rs = append(rs, rd)
		return ok
	})
	*dst = rs
	return ok
}

func (r *plainReader) writes(dst *[]Write) bool {
	ws := []Write{}
	ok := r.array(func() bool {
		var w Write
		var seen uint
		ok := r.object(func(name string) bool {
			var bit uint
			ok := false
			switch name {
			case "path":
				bit, ok = 1, r.str(&w.Path)
			case "op":
				bit, ok = 2, r.str((*string)(&w.Op))
			case "value":
				bit, ok = 4, r.raw((*[]byte)(&w.Value))
			}
			if !ok || seen&bit != 0 {
				return false
			}
			seen |= bit
			return true
		})
		ws = append(ws, w)
		return ok
	})
	*dst = ws
	return ok
}
