/*
 * pmdafloor: a PMDA whose fetch does no work, the floor of the PCP fetch path.
 *
 * It serves the same shapes as the benchmark's MMV files, through a dynamic PMNS subtree
 * like the mmv agents (pmcd forwards name lookups to it): for each NAME:METRICS:INSTANCES
 * argument, cluster k+1 holds METRICS metrics ROOT.NAME.mNNN (item j: U64 when j is even,
 * DOUBLE when odd, as the benchmark writer) over an indom of INSTANCES instances iNNNNN.
 * The fetch callback returns the instance number: no lookup, no read, nothing per value
 * beyond what pmdaFetch, pmcd and the PDU encoding do anyway.
 *
 * usage: pmdafloor [-d DOMAIN] [-l LOG] [-r ROOT] NAME:METRICS:INSTANCES ...
 * build: gcc -O2 -o pmdafloor pmdafloor.c -lpcp_pmda -lpcp
 */
#include <pcp/pmapi.h>
#include <pcp/pmda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pmdaNameSpace *tree;
static pmdaInterface dispatch;

static int
floor_fetch_value(pmdaMetric *mdesc, unsigned int inst, pmAtomValue *atom)
{
    if (mdesc->m_desc.type == PM_TYPE_U64)
	atom->ull = inst;
    else
	atom->d = inst;
    return 1;
}

static int
floor_pmid(const char *name, pmID *pmid, pmdaExt *pmda)
{
    return pmdaTreePMID(tree, name, pmid);
}

static int
floor_name(pmID pmid, char ***nameset, pmdaExt *pmda)
{
    return pmdaTreeName(tree, pmid, nameset);
}

static int
floor_children(const char *name, int flag, char ***kids, int **sts, pmdaExt *pmda)
{
    return pmdaTreeChildren(tree, name, flag, kids, sts);
}

static pmdaOptions opts = {
    .short_options = "D:d:l:r:?",
    .long_options = (pmLongOptions[]) {
	PMDA_OPTIONS_HEADER("Options"),
	PMDAOPT_DEBUG,
	PMDAOPT_DOMAIN,
	PMDAOPT_LOGFILE,
	{ "root", 1, 'r', "ROOT", "name of the PMNS root (default floor)" },
	PMOPT_HELP,
	PMDA_OPTIONS_END
    },
};

int
main(int argc, char **argv)
{
    const char *root = "floor";
    pmdaMetric *metrics = NULL;
    pmdaIndom *indoms;
    int nmetrics = 0, nfiles, c, k, j, i;
    char name[256];

    pmSetProgname(argv[0]);
    pmdaDaemon(&dispatch, PMDA_INTERFACE_7, pmGetProgname(), 72, "floor.log", NULL);
    while ((c = pmdaGetOptions(argc, argv, &opts, &dispatch)) != EOF) {
	if (c == 'r')
	    root = opts.optarg;
	else
	    opts.errors++;
    }
    nfiles = argc - opts.optind;
    if (opts.errors || nfiles < 1) {
	pmdaUsageMessage(&opts);
	exit(1);
    }
    if (pmdaTreeCreate(&tree) < 0) {
	fprintf(stderr, "pmdaTreeCreate failed\n");
	exit(1);
    }
    indoms = calloc(nfiles, sizeof(pmdaIndom));
    for (k = 0; k < nfiles; k++) {
	char file[128];
	int nm, ni;

	if (sscanf(argv[opts.optind + k], "%127[^:]:%d:%d", file, &nm, &ni) != 3 ||
	    nm < 1 || nm > 1024 || ni < 1) {
	    fprintf(stderr, "%s: bad shape %s\n", pmGetProgname(), argv[opts.optind + k]);
	    exit(1);
	}
	indoms[k].it_indom = pmInDom_build(dispatch.domain, k + 1);
	indoms[k].it_numinst = ni;
	indoms[k].it_set = calloc(ni, sizeof(pmdaInstid));
	for (i = 0; i < ni; i++) {
	    snprintf(name, sizeof(name), "i%05d", i);
	    indoms[k].it_set[i].i_inst = i;
	    indoms[k].it_set[i].i_name = strdup(name);
	}
	metrics = realloc(metrics, (nmetrics + nm) * sizeof(pmdaMetric));
	for (j = 0; j < nm; j++, nmetrics++) {
	    pmdaMetric *m = &metrics[nmetrics];

	    memset(m, 0, sizeof(*m));
	    m->m_desc.pmid = pmID_build(dispatch.domain, k + 1, j);
	    m->m_desc.type = (j % 2 == 0) ? PM_TYPE_U64 : PM_TYPE_DOUBLE;
	    m->m_desc.indom = indoms[k].it_indom;
	    m->m_desc.sem = (j % 2 == 0) ? PM_SEM_COUNTER : PM_SEM_INSTANT;
	    snprintf(name, sizeof(name), "%s.%s.m%03d", root, file, j);
	    pmdaTreeInsert(tree, m->m_desc.pmid, name);
	}
    }
    pmdaTreeRebuildHash(tree, nmetrics);
    pmdaOpenLog(&dispatch);
    pmdaSetFlags(&dispatch, PMDA_EXT_FLAG_HASHED);
    dispatch.version.seven.pmid = floor_pmid;
    dispatch.version.seven.name = floor_name;
    dispatch.version.seven.children = floor_children;
    pmdaSetFetchCallBack(&dispatch, floor_fetch_value);
    pmdaInit(&dispatch, indoms, nfiles, metrics, nmetrics);
    pmdaConnect(&dispatch);
    pmdaMain(&dispatch);
    exit(0);
}
