/*
 * Performance Metrics Domain of the mmv agent (as PCP's stdpmid: MMV 70);
 * pmdaproc.sh reads the first #define.
 */
#define MMV 70
