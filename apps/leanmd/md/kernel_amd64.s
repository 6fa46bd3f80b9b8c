//go:build amd64 && !purego

#include "textflag.h"

// LOAD_LANES loads the pass's lanes (x, y, z) into three registers.
#define LOAD_LANES(x, y, z) \
	MOVQ lanes+0(FP), AX \
	VMOVUPD 0(AX), x \
	VMOVUPD 64(AX), y \
	VMOVUPD 128(AX), z

// START_ROWS loads the arguments both kernels share: SI, DI = &others[from],
// &fo[from], R10 n, R11 j = from, R13 from, R12 self; then compares j with n.
#define START_ROWS \
	MOVQ others+8(FP), SI \
	MOVQ fo+24(FP), DI \
	MOVQ n+16(FP), R10 \
	MOVQ from+32(FP), R11 \
	MOVBQZX self+40(FP), R12 \
	MOVQ R11, R13 \
	LEAQ (R11)(R11*2), AX \
	SHLQ $3, AX \
	ADDQ AX, SI \
	ADDQ AX, DI \
	CMPQ R11, R10

// SELF_LANES keeps in AX, a self pass's lane bits, only the lanes before
// the atom j−from+1 (none past the last lane, last: the lane count − 1).
#define SELF_LANES(last, known) \
	MOVQ R11, CX \
	SUBQ R13, CX \
	CMPQ CX, last \
	JGE known \
	INCQ CX \
	MOVL $1, DX \
	SHLL CX, DX \
	DECL DX \
	ANDL DX, AX

// SUBTRACT_LANES takes each lane's force in AX's lane bits off fo[j] (DI),
// lane by lane in lane order, in X13-X15: it puts the forces' x, y and z
// lanes (gx, gy, gz) on the frame at 0(SP), y(SP) and z(SP) first.
#define SUBTRACT_LANES(gx, gy, gz, y, z, top) \
	VMOVUPD gx, 0(SP) \
	VMOVUPD gy, y(SP) \
	VMOVUPD gz, z(SP) \
	VMOVSD 0(DI), X13 \
	VMOVSD 8(DI), X14 \
	VMOVSD 16(DI), X15 \
top: \
	BSFL AX, BX \
	VSUBSD 0(SP)(BX*8), X13, X13 \
	VSUBSD y(SP)(BX*8), X14, X14 \
	VSUBSD z(SP)(BX*8), X15, X15 \
	LEAL -1(AX), CX \
	ANDL CX, AX \
	JNZ top \
	VMOVSD X13, 0(DI) \
	VMOVSD X14, 8(DI) \
	VMOVSD X15, 16(DI)

// RETURN_SUMS stores the lanes' force and energy sums to out and returns.
#define RETURN_SUMS(fx, fy, fz, e) \
	MOVQ out+56(FP), AX \
	VMOVUPD fx, 0(AX) \
	VMOVUPD fy, 64(AX) \
	VMOVUPD fz, 128(AX) \
	VMOVUPD e, 192(AX) \
	VZEROUPPER \
	RET

// NEXT_ATOM steps SI, DI and j to the next atom and loops while j < n.
#define NEXT_ATOM(top) \
	ADDQ $24, SI \
	ADDQ $24, DI \
	INCQ R11 \
	CMPQ R11, R10 \
	JLT top

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
	LOAD_LANES(Z0, Z1, Z2)
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
	START_ROWS
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
	SELF_LANES($7, lanesknown)
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
	SUBTRACT_LANES(Z20, Z21, Z22, 64, 128, lane)

next:
	NEXT_ATOM(loop)

done:
	RETURN_SUMS(Z9, Z10, Z11, Z12)

// func rows4AVX2(lanes *[3][vecRows]float64, others *Vec3, n int, fo *Vec3, from int, self bool, c *vecConsts4, out *[4][vecRows]float64)
//
// rows8AVX512 on four lanes of a YMM register, for CPUs with AVX2 and no
// AVX-512: the same operations in the same order. AVX2 has no mask
// registers: a lane's sums take its force ANDed with the lane mask (+0
// where the pair is not within the cutoff, which leaves a sum as it is),
// and a self pass's lane mask comes from laneMasks. The constants are
// read from memory (c: each four times): 16 YMM registers do not hold
// them beside the pass's values. Registers:
//   Y0-Y2 the lanes' x, y, z   Y3-Y6 the lanes' force and energy sums
//   SI &others[j]  DI &fo[j]  R11 j  R10 n  R13 from  R12 self  R9 doPE
//   R8 c
TEXT ·rows4AVX2(SB), NOSPLIT, $96-64
	LOAD_LANES(Y0, Y1, Y2)
	MOVQ c+48(FP), R8
	MOVBQZX 192(R8), R9
	VXORPD Y3, Y3, Y3
	VXORPD Y4, Y4, Y4
	VXORPD Y5, Y5, Y5
	VXORPD Y6, Y6, Y6
	START_ROWS
	JGE done4

loop4:
	VBROADCASTSD 0(SI), Y7
	VBROADCASTSD 8(SI), Y8
	VBROADCASTSD 16(SI), Y9
	VSUBPD Y7, Y0, Y7
	VSUBPD Y8, Y1, Y8
	VSUBPD Y9, Y2, Y9
	VMULPD Y7, Y7, Y10
	VMULPD Y8, Y8, Y11
	VADDPD Y11, Y10, Y10
	VMULPD Y9, Y9, Y11
	VADDPD Y11, Y10, Y10
	// 1 < r² < 26²
	VCMPPD $0x11, 160(R8), Y10, Y11
	VCMPPD $0x1e, 128(R8), Y10, Y12
	VANDPD Y12, Y11, Y11
	VMOVMSKPD Y11, AX
	TESTQ R12, R12
	JZ lanesknown4
	SELF_LANES($3, lanesknown4)
	MOVQ AX, CX
	SHLQ $5, CX
	LEAQ laneMasks<>(SB), DX
	VMOVUPD (DX)(CX*1), Y11

lanesknown4:
	TESTL AX, AX
	JZ next4
	// q = 1/r², q³, s = (a12·q³ − b6)·q³·q
	VMOVUPD 128(R8), Y12
	VDIVPD Y10, Y12, Y12
	VMULPD Y12, Y12, Y13
	VMULPD Y12, Y13, Y13
	VMULPD 0(R8), Y13, Y14
	VSUBPD 32(R8), Y14, Y14
	VMULPD Y13, Y14, Y14
	VMULPD Y12, Y14, Y14
	VMULPD Y14, Y7, Y7
	VMULPD Y14, Y8, Y8
	VMULPD Y14, Y9, Y9
	VANDPD Y11, Y7, Y15
	VADDPD Y15, Y3, Y3
	VANDPD Y11, Y8, Y15
	VADDPD Y15, Y4, Y4
	VANDPD Y11, Y9, Y15
	VADDPD Y15, Y5, Y5
	TESTQ R9, R9
	JZ noenergy4
	// energy ea·q³·q³ − eb·q³
	VMULPD 64(R8), Y13, Y14
	VMULPD Y13, Y14, Y14
	VMULPD 96(R8), Y13, Y15
	VSUBPD Y15, Y14, Y14
	VANDPD Y11, Y14, Y14
	VADDPD Y14, Y6, Y6

noenergy4:
	SUBTRACT_LANES(Y7, Y8, Y9, 32, 64, lane4)

next4:
	NEXT_ATOM(loop4)

done4:
	RETURN_SUMS(Y3, Y4, Y5, Y6)

// laneMasks[b] is the four-lane mask of bits b (all ones where bit l is set).
DATA laneMasks<>+0(SB)/8, $0x0000000000000000
DATA laneMasks<>+8(SB)/8, $0x0000000000000000
DATA laneMasks<>+16(SB)/8, $0x0000000000000000
DATA laneMasks<>+24(SB)/8, $0x0000000000000000
DATA laneMasks<>+32(SB)/8, $0xffffffffffffffff
DATA laneMasks<>+40(SB)/8, $0x0000000000000000
DATA laneMasks<>+48(SB)/8, $0x0000000000000000
DATA laneMasks<>+56(SB)/8, $0x0000000000000000
DATA laneMasks<>+64(SB)/8, $0x0000000000000000
DATA laneMasks<>+72(SB)/8, $0xffffffffffffffff
DATA laneMasks<>+80(SB)/8, $0x0000000000000000
DATA laneMasks<>+88(SB)/8, $0x0000000000000000
DATA laneMasks<>+96(SB)/8, $0xffffffffffffffff
DATA laneMasks<>+104(SB)/8, $0xffffffffffffffff
DATA laneMasks<>+112(SB)/8, $0x0000000000000000
DATA laneMasks<>+120(SB)/8, $0x0000000000000000
DATA laneMasks<>+128(SB)/8, $0x0000000000000000
DATA laneMasks<>+136(SB)/8, $0x0000000000000000
DATA laneMasks<>+144(SB)/8, $0xffffffffffffffff
DATA laneMasks<>+152(SB)/8, $0x0000000000000000
DATA laneMasks<>+160(SB)/8, $0xffffffffffffffff
DATA laneMasks<>+168(SB)/8, $0x0000000000000000
DATA laneMasks<>+176(SB)/8, $0xffffffffffffffff
DATA laneMasks<>+184(SB)/8, $0x0000000000000000
DATA laneMasks<>+192(SB)/8, $0x0000000000000000
DATA laneMasks<>+200(SB)/8, $0xffffffffffffffff
DATA laneMasks<>+208(SB)/8, $0xffffffffffffffff
DATA laneMasks<>+216(SB)/8, $0x0000000000000000
DATA laneMasks<>+224(SB)/8, $0xffffffffffffffff
DATA laneMasks<>+232(SB)/8, $0xffffffffffffffff
DATA laneMasks<>+240(SB)/8, $0xffffffffffffffff
DATA laneMasks<>+248(SB)/8, $0x0000000000000000
DATA laneMasks<>+256(SB)/8, $0x0000000000000000
DATA laneMasks<>+264(SB)/8, $0x0000000000000000
DATA laneMasks<>+272(SB)/8, $0x0000000000000000
DATA laneMasks<>+280(SB)/8, $0xffffffffffffffff
DATA laneMasks<>+288(SB)/8, $0xffffffffffffffff
DATA laneMasks<>+296(SB)/8, $0x0000000000000000
DATA laneMasks<>+304(SB)/8, $0x0000000000000000
DATA laneMasks<>+312(SB)/8, $0xffffffffffffffff
DATA laneMasks<>+320(SB)/8, $0x0000000000000000
DATA laneMasks<>+328(SB)/8, $0xffffffffffffffff
DATA laneMasks<>+336(SB)/8, $0x0000000000000000
DATA laneMasks<>+344(SB)/8, $0xffffffffffffffff
DATA laneMasks<>+352(SB)/8, $0xffffffffffffffff
DATA laneMasks<>+360(SB)/8, $0xffffffffffffffff
DATA laneMasks<>+368(SB)/8, $0x0000000000000000
DATA laneMasks<>+376(SB)/8, $0xffffffffffffffff
DATA laneMasks<>+384(SB)/8, $0x0000000000000000
DATA laneMasks<>+392(SB)/8, $0x0000000000000000
DATA laneMasks<>+400(SB)/8, $0xffffffffffffffff
DATA laneMasks<>+408(SB)/8, $0xffffffffffffffff
DATA laneMasks<>+416(SB)/8, $0xffffffffffffffff
DATA laneMasks<>+424(SB)/8, $0x0000000000000000
DATA laneMasks<>+432(SB)/8, $0xffffffffffffffff
DATA laneMasks<>+440(SB)/8, $0xffffffffffffffff
DATA laneMasks<>+448(SB)/8, $0x0000000000000000
DATA laneMasks<>+456(SB)/8, $0xffffffffffffffff
DATA laneMasks<>+464(SB)/8, $0xffffffffffffffff
DATA laneMasks<>+472(SB)/8, $0xffffffffffffffff
DATA laneMasks<>+480(SB)/8, $0xffffffffffffffff
DATA laneMasks<>+488(SB)/8, $0xffffffffffffffff
DATA laneMasks<>+496(SB)/8, $0xffffffffffffffff
DATA laneMasks<>+504(SB)/8, $0xffffffffffffffff
GLOBL laneMasks<>(SB), RODATA|NOPTR, $512
