from common.skeleton import idle

idle("analyzer", arrives_with="the memory loop")
