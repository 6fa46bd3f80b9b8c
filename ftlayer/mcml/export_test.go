package mcml

// joinsBytes is Joins as FuzzFromJoins reads its input.
func (d *Dendrogram) joinsBytes() []byte {
	var b []byte
	for _, j := range d.Joins() {
		b = append(b, byte(int8(j[0])), byte(int8(j[1])))
	}
	return b
}
