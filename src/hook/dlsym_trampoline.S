/* dlsym override. Asks tandem_dlsym_route(handle, name) for {hook, real_dlsym}; returns the
 * hook when there is one, otherwise tail-jumps into glibc's dlsym with the original arguments
 * and return address, so that glibc sees the real caller (RTLD_NEXT semantics preserved). */
#if defined(__x86_64__)
        .text
        .globl  dlsym
        .type   dlsym, @function
dlsym:
        .cfi_startproc
        pushq   %rdi
        .cfi_adjust_cfa_offset 8
        pushq   %rsi
        .cfi_adjust_cfa_offset 8
        subq    $8, %rsp            /* keep the stack 16-byte aligned for the call */
        .cfi_adjust_cfa_offset 8
        call    tandem_dlsym_route  /* returns hook in rax, real dlsym in rdx */
        addq    $8, %rsp
        .cfi_adjust_cfa_offset -8
        popq    %rsi
        .cfi_adjust_cfa_offset -8
        popq    %rdi
        .cfi_adjust_cfa_offset -8
        testq   %rax, %rax
        jnz     1f
        testq   %rdx, %rdx
        jz      1f                  /* no glibc dlsym found: answer NULL */
        jmp     *%rdx
1:      ret
        .cfi_endproc
        .size   dlsym, .-dlsym
#elif defined(__aarch64__)
        .text
        .globl  dlsym
        .type   dlsym, %function
dlsym:
        .cfi_startproc
        stp     x29, x30, [sp, #-32]!
        .cfi_def_cfa_offset 32
        .cfi_offset 29, -32
        .cfi_offset 30, -24
        mov     x29, sp
        stp     x0, x1, [sp, #16]
        bl      tandem_dlsym_route  /* returns hook in x0, real dlsym in x1 */
        mov     x16, x1
        mov     x17, x0
        ldp     x0, x1, [sp, #16]
        ldp     x29, x30, [sp], #32
        .cfi_def_cfa_offset 0
        cbnz    x17, 1f
        cbz     x16, 2f
        br      x16
1:      mov     x0, x17
        ret
2:      mov     x0, #0
        ret
        .cfi_endproc
        .size   dlsym, .-dlsym
#else
#error "tandem's dlsym trampoline supports x86-64 and aarch64"
#endif
        .section .note.GNU-stack,"",%progbits
