//go:build amd64 && !purego

#include "textflag.h"

// func rows8AVX512(lanes *[3][8]float64, others *Vec3, n int, fo *Vec3, from int, self bool, c *vecConsts, out *[4][8]float64)
//
// Eight rows at once, one atom of the first list per lane of a ZMM
// register, down others[from:n]; see rows8 in kernel_amd64.go for what it
// computes and why the sums keep the scalar kernel's bits. Registers:
//   Z0-Z2 the lanes' x, y, z      Z3 1.0 (the floor)   Z4 26² (the cutoff)
//   Z5 a12  Z6 b6  Z7 ea  Z8 eb   Z9-Z12 the lanes' force and energy sums
//   SI &others[j]  DI &fo[j]  R11 j  R10 n  R13 from  R12 self  R9 doPE
//   the frame holds one pass's forces (x, y, z: 64 bytes each) for the
//   serial subtraction from fo[j]
TEXT ·rows8AVX512(SB), NOSPLIT, $192-64
	MOVQ lanes+0(FP), AX
	VMOVUPD 0(AX), Z0
	VMOVUPD 64(AX), Z1
	VMOVUPD 128(AX), Z2
	MOVQ c+48(FP), AX
	VBROADCASTSD 0(AX), Z5
	VBROADCASTSD 8(AX), Z6
	VBROADCASTSD 16(AX), Z7
	VBROADCASTSD 24(AX), Z8
	VBROADCASTSD 32(AX), Z3
	VBROADCASTSD 40(AX), Z4
	MOVBQZX 48(AX), R9
	VPXORQ Z9, Z9, Z9
	VPXORQ Z10, Z10, Z10
	VPXORQ Z11, Z11, Z11
	VPXORQ Z12, Z12, Z12
	MOVQ others+8(FP), SI
	MOVQ fo+24(FP), DI
	MOVQ n+16(FP), R10
	MOVQ from+32(FP), R11
	MOVBQZX self+40(FP), R12
	MOVQ R11, R13
	LEAQ (R11)(R11*2), AX
	SHLQ $3, AX
	ADDQ AX, SI
	ADDQ AX, DI
	CMPQ R11, R10
	JGE done

loop:
	// separation and r², as the scalar kernel: (dx·dx + dy·dy) + dz·dz
	VBROADCASTSD 0(SI), Z13
	VBROADCASTSD 8(SI), Z14
	VBROADCASTSD 16(SI), Z15
	VSUBPD Z13, Z0, Z13
	VSUBPD Z14, Z1, Z14
	VSUBPD Z15, Z2, Z15
	VMULPD Z13, Z13, Z16
	VMULPD Z14, Z14, Z17
	VADDPD Z17, Z16, Z16
	VMULPD Z15, Z15, Z17
	VADDPD Z17, Z16, Z16
	// the lanes within the cutoff and beyond the floor: 1 < r² < 26²
	VCMPPD $0x11, Z4, Z16, K1
	VCMPPD $0x1e, Z3, Z16, K2
	KANDW K2, K1, K1
	KMOVW K1, AX
	// a self pass: lane l meets only the atoms after its own
	TESTQ R12, R12
	JZ lanesknown
	MOVQ R11, CX
	SUBQ R13, CX
	CMPQ CX, $7
	JGE lanesknown
	INCQ CX
	MOVL $1, DX
	SHLL CX, DX
	DECL DX
	ANDL DX, AX
	KMOVW AX, K1

lanesknown:
	TESTL AX, AX
	JZ next
	// q = 1/r², q³, s = (a12·q³ − b6)·q³·q, as the scalar kernel
	VDIVPD Z16, Z3, Z17
	VMULPD Z17, Z17, Z18
	VMULPD Z17, Z18, Z18
	VMULPD Z18, Z5, Z19
	VSUBPD Z6, Z19, Z19
	VMULPD Z18, Z19, Z19
	VMULPD Z17, Z19, Z19
	VMULPD Z19, Z13, Z20
	VMULPD Z19, Z14, Z21
	VMULPD Z19, Z15, Z22
	// the lanes within add their force to their sums (merge masking:
	// the others keep theirs)
	VADDPD Z20, Z9, K1, Z9
	VADDPD Z21, Z10, K1, Z10
	VADDPD Z22, Z11, K1, Z11
	TESTQ R9, R9
	JZ noenergy
	// energy ea·q³·q³ − eb·q³
	VMULPD Z18, Z7, Z23
	VMULPD Z18, Z23, Z23
	VMULPD Z18, Z8, Z24
	VSUBPD Z24, Z23, Z23
	VADDPD Z23, Z12, K1, Z12

noenergy:
	// fo[j] −= each lane's force within, lane by lane (the first
	// list's order), in registers
	VMOVUPD Z20, 0(SP)
	VMOVUPD Z21, 64(SP)
	VMOVUPD Z22, 128(SP)
	VMOVSD 0(DI), X13
	VMOVSD 8(DI), X14
	VMOVSD 16(DI), X15

lane:
	BSFL AX, BX
	VSUBSD 0(SP)(BX*8), X13, X13
	VSUBSD 64(SP)(BX*8), X14, X14
	VSUBSD 128(SP)(BX*8), X15, X15
	LEAL -1(AX), CX
	ANDL CX, AX
	JNZ lane
	VMOVSD X13, 0(DI)
	VMOVSD X14, 8(DI)
	VMOVSD X15, 16(DI)

next:
	ADDQ $24, SI
	ADDQ $24, DI
	INCQ R11
	CMPQ R11, R10
	JLT loop

done:
	MOVQ out+56(FP), AX
	VMOVUPD Z9, 0(AX)
	VMOVUPD Z10, 64(AX)
	VMOVUPD Z11, 128(AX)
	VMOVUPD Z12, 192(AX)
	VZEROUPPER
	RET
