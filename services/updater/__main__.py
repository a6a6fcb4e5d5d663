from common.skeleton import idle

idle("updater", arrives_with="the memory loop")
