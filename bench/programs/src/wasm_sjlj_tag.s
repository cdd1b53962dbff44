# The exception tag that setjmp/longjmp through wasm exception handling throws and catches
# (LLVM's -wasm-enable-sjlj lowering and wasi-libc's longjmp refer to it; zig's libc
# leaves it undefined). Its payload is the i32 address of the longjmp arguments.
	.globl	__c_longjmp
	.tagtype	__c_longjmp i32
__c_longjmp:
