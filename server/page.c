/*
 * page.c: the chat page (server/page.html) embedded in the binary as it is, with no build step:
 * the assembler's .incbin copies the file's bytes into read-only data (the Makefile makes this
 * object depend on the page). A NUL follows the bytes; srv_page_html_len does not count it.
 */
#include "http.h"

__asm__(".section .rodata\n"
        ".global srv_page_html\n"
        ".type srv_page_html, @object\n"
        ".balign 16\n"
        "srv_page_html:\n"
        ".incbin \"server/page.html\"\n"
        ".Lsrv_page_end:\n"
        ".byte 0\n"
        ".global srv_page_html_len\n"
        ".type srv_page_html_len, @object\n"
        ".balign 4\n"
        "srv_page_html_len:\n"
        ".int .Lsrv_page_end - srv_page_html\n"
        ".previous\n");
