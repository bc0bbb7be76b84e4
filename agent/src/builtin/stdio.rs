//! The stdio family: `fwrite`, `fputs`, `printf`, `fgets`, `getline`, `fopen`, ... marked as
//! `output`, `input` or `files` around the real function (the variadic printf family builds a
//! `va_list` and calls the `v` form).

use super::*;

interpose! {
    list STDIO;
    OUTPUT true fn fwrite(ptr: *const c_void, size: SizeT, n: SizeT, stream: *mut File) -> SizeT;
    OUTPUT true fn fwrite_unlocked(ptr: *const c_void, size: SizeT, n: SizeT, stream: *mut File) -> SizeT;
    OUTPUT true fn fputs(s: *const c_char, stream: *mut File) -> c_int;
    OUTPUT true fn fputs_unlocked(s: *const c_char, stream: *mut File) -> c_int;
    OUTPUT true fn puts(s: *const c_char) -> c_int;
    OUTPUT true fn fputc(c: c_int, stream: *mut File) -> c_int;
    OUTPUT true fn fputc_unlocked(c: c_int, stream: *mut File) -> c_int;
    OUTPUT true fn putc(c: c_int, stream: *mut File) -> c_int;
    OUTPUT true fn putc_unlocked(c: c_int, stream: *mut File) -> c_int;
    OUTPUT true fn _IO_putc(c: c_int, stream: *mut File) -> c_int;
    OUTPUT true fn putchar(c: c_int) -> c_int;
    OUTPUT true fn putchar_unlocked(c: c_int) -> c_int;
    OUTPUT true fn __overflow(stream: *mut File, c: c_int) -> c_int;
    OUTPUT true fn fflush(stream: *mut File) -> c_int;
    OUTPUT true fn fflush_unlocked(stream: *mut File) -> c_int;
    OUTPUT true fn vfprintf(stream: *mut File, format: *const c_char, ap: *mut c_void) -> c_int;
    OUTPUT true fn vprintf(format: *const c_char, ap: *mut c_void) -> c_int;
    OUTPUT false fn vdprintf(fd: c_int, format: *const c_char, ap: *mut c_void) -> c_int;
    OUTPUT true fn __vfprintf_chk(stream: *mut File, flag: c_int, format: *const c_char, ap: *mut c_void) -> c_int;
    OUTPUT true fn __vprintf_chk(flag: c_int, format: *const c_char, ap: *mut c_void) -> c_int;

    INPUT true fn fread(ptr: *mut c_void, size: SizeT, n: SizeT, stream: *mut File) -> SizeT;
    INPUT true fn fread_unlocked(ptr: *mut c_void, size: SizeT, n: SizeT, stream: *mut File) -> SizeT;
    INPUT true fn fgets(s: *mut c_char, size: c_int, stream: *mut File) -> *mut c_char;
    INPUT true fn fgets_unlocked(s: *mut c_char, size: c_int, stream: *mut File) -> *mut c_char;
    INPUT true fn fgetc(stream: *mut File) -> c_int;
    INPUT true fn getc(stream: *mut File) -> c_int;
    INPUT true fn _IO_getc(stream: *mut File) -> c_int;
    INPUT true fn getline(line: *mut *mut c_char, n: *mut SizeT, stream: *mut File) -> SsizeT;
    INPUT true fn getdelim(line: *mut *mut c_char, n: *mut SizeT, delim: c_int, stream: *mut File) -> SsizeT;
    INPUT true fn __uflow(stream: *mut File) -> c_int;
    INPUT true fn __underflow(stream: *mut File) -> c_int;

    WAITING true fn pthread_cond_wait(cond: *mut c_void, mutex: *mut c_void) -> c_int;
    WAITING true fn pthread_cond_timedwait(cond: *mut c_void, mutex: *mut c_void, abstime: *const c_void) -> c_int;
    WAITING true fn pthread_cond_clockwait(cond: *mut c_void, mutex: *mut c_void, clock: c_int, abstime: *const c_void) -> c_int;

    SLEEP true fn usleep(us: c_uint) -> c_int;
    SLEEP true fn sleep(seconds: c_uint) -> c_uint;

    PROCESS true fn system(command: *const c_char) -> c_int;

    FILES true fn fopen(path: *const c_char, mode: *const c_char) -> *mut File;
    FILES true fn fopen64(path: *const c_char, mode: *const c_char) -> *mut File;
}

interpose_variadic! {
    list PRINTF;
    OUTPUT fn printf(format: *const c_char) -> c_int => vprintf, "8", "rsi", "rdx", "rcx";
    OUTPUT fn fprintf(stream: *mut File, format: *const c_char) -> c_int => vfprintf, "16", "rdx", "rcx", "r8";
    OUTPUT fn dprintf(fd: c_int, format: *const c_char) -> c_int => vdprintf, "16", "rdx", "rcx", "r8";
    OUTPUT fn __printf_chk(flag: c_int, format: *const c_char) -> c_int => __vprintf_chk, "16", "rdx", "rcx", "r8";
    OUTPUT fn __fprintf_chk(stream: *mut File, flag: c_int, format: *const c_char) -> c_int => __vfprintf_chk, "24", "rcx", "r8", "r9";
}
