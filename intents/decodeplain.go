package intents

// intent reads an intent by hand, as strictUnmarshal would: each member
// name exactly as schemas/intent.json spells it and given once. What it
// does not take (see plainReader) goes to strictUnmarshal, which also words
// the errors.
func (r *plainReader) intent(data []byte, in *Intent) bool {
	r.reset(data)
	return r.object(func(name string) (uint, bool) {
		switch name {
		case "id":
			return 1 << 0, r.str(&in.ID)
		case "agent":
			return 1 << 1, r.str(&in.Agent)
		case "kind":
			return 1 << 2, r.str((*string)(&in.Kind))
		case "txn":
			return 1 << 3, r.str(&in.Txn)
		case "fence":
			return 1 << 4, r.uint(&in.Fence)
		case "action":
			return 1 << 5, r.str(&in.Action)
		case "reads":
			return 1 << 6, r.reads(&in.Reads)
		case "writes":
			return 1 << 7, r.writes(&in.Writes)
		case "pre":
			return 1 << 8, r.strs(&in.Pre)
		case "post":
			return 1 << 9, r.strs(&in.Post)
		case "priority":
			return 1 << 10, r.int(&in.Priority)
		case "lease_ms":
			return 1 << 11, r.int(&in.LeaseMS)
		case "on_conflict":
			return 1 << 12, r.str((*string)(&in.OnConflict))
		case "wait_ms":
			return 1 << 13, r.int(&in.WaitMS)
		case "meta":
			return 1 << 14, r.raw((*[]byte)(&in.Meta))
		}
		return 0, false
	}) && r.end()
}

func (r *plainReader) reads(dst *[]Read) bool {
	rs := []Read{}
	ok := r.array(func() bool {
		var rd Read
		ok := r.object(func(name string) (uint, bool) {
			switch name {
			case "path":
				return 1 << 0, r.str(&rd.Path)
			case "version":
				rd.Version = new(uint64)
				return 1 << 1, r.uint(rd.Version)
			}
			return 0, false
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
		ok := r.object(func(name string) (uint, bool) {
			switch name {
			case "path":
				return 1 << 0, r.str(&w.Path)
			case "op":
				return 1 << 1, r.str((*string)(&w.Op))
			case "value":
				return 1 << 2, r.raw((*[]byte)(&w.Value))
			}
			return 0, false
		})
		ws = append(ws, w)
		return ok
	})
	*dst = ws
	return ok
}
