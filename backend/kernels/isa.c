/* Which instruction-set path this build of the kernels compiled, in words (for doctor and the tests).

   The kernels choose their vector paths at compile time (linear.c, qlinear.c: AVX-512, else AVX2,
   else plain C that the compiler vectorizes as it can), so the answer is the compiler's predefined
   macros, not the CPU's report: a build for -march=haswell on an AVX-512 CPU says AVX2. */
#include "kernels.h"

const char *psk_isa(void) {
    return
#if defined(__AVX512F__)
        "AVX-512"
#elif defined(__AVX2__)
        "AVX2"
#elif defined(__ARM_NEON)
        "NEON"
#else
        "portable C"
#endif
        ;
}

/* The features the paths use, as the compiler saw them: "avx512f avx512bw ..." (space-separated). */
const char *psk_isa_features(void) {
    return ""
#if defined(__AVX512F__)
        " avx512f"
#endif
#if defined(__AVX512BW__)
        " avx512bw"
#endif
#if defined(__AVX512VL__)
        " avx512vl"
#endif
#if defined(__AVX512VNNI__)
        " avx512vnni"
#endif
#if defined(__AVX512BF16__)
        " avx512bf16"
#endif
#if defined(__AVX2__)
        " avx2"
#endif
#if defined(__FMA__)
        " fma"
#endif
#if defined(__F16C__)
        " f16c"
#endif
#if defined(__ARM_NEON)
        " neon"
#endif
#if defined(__ARM_FEATURE_DOTPROD)
        " dotprod"
#endif
#if defined(__ARM_FEATURE_MATMUL_INT8)
        " i8mm"
#endif
#if defined(__ARM_FEATURE_FP16_VECTOR_ARITHMETIC)
        " fp16"
#endif
#if defined(__ARM_FEATURE_BF16) || defined(__ARM_FEATURE_BF16_VECTOR_ARITHMETIC)
        " bf16"
#endif
#if defined(__ARM_FEATURE_SVE)
        " sve"
#endif
        ;
}
