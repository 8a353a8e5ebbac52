/* cmd_list.c — flashlab list: every implementation this build registered, with its device,
 * variant, precision, features and lesson. */
#include "cli.h"

int cmd_list(Options *o)
{
    if (o->npositional > 0)
        return usage_error("list", "unexpected argument '%s'", o->positional[0]);
    const StageImpl *const *all = stage_registry();
    if (!all[0]) {
        printf("no stages in this build yet (stages/NN_name/CMakeLists.txt registers them)\n");
        return FL_OK;
    }
    printf("%-5s  %-16s  %-6s  %-11s  %-13s  %s\n%7s%s\n", "stage", "name", "device", "variant", "precision",
           "features", "", "the lesson");
    for (int i = 0; all[i]; i++) {
        char features[256], precision[48];
        printf("%-5s  %-16s  %-6s  %-11s  %-13s  %s\n", all[i]->stage, all[i]->name, device_name(all[i]->device),
               all[i]->variant[0] ? all[i]->variant : "-", precision_label(all[i], precision, sizeof precision),
               feature_list(all[i], features, sizeof features));
        print_wrapped(7, CLI_WIDTH, all[i]->lesson);
    }
    printf("cuda device: %s\n", cuda_device_available() ? cuda_device_description() : "none");
    return FL_OK;
}
